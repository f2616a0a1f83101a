// Static memory policy vectors: hints and allocate/remove sequences computed
// by the upstream code over small NUMA machines (see cpumanager_vectors_test.go).
package memorymanager

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"testing"

	cadvisorapi "github.com/google/cadvisor/info/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
)

const vecGiB = uint64(1 << 30)

type vecAffinity struct {
	hints map[string]topologymanager.TopologyHint
}

func (f *vecAffinity) GetAffinity(podUID, name string) topologymanager.TopologyHint {
	return f.hints[podUID+"/"+name]
}
func (f *vecAffinity) GetPolicy() topologymanager.Policy { return topologymanager.NewNonePolicy() }

type vecMachine struct {
	Nodes     []uint64 `json:"nodes"`     // memory per node (bytes)
	Hugepages []uint64 `json:"hugepages"` // 2Mi pages per node
	Reserved  []uint64 `json:"reserved"`  // memory reserved per node
}

type vecContainer struct {
	Name      string `json:"name"`
	Memory    uint64 `json:"memory"`
	Hugepages uint64 `json:"hugepages,omitempty"` // hugepages-2Mi bytes
	Init      bool   `json:"init,omitempty"`
	Hint      []int  `json:"hint,omitempty"`
	Preferred bool   `json:"preferred,omitempty"`
}

type vecStep struct {
	Op         string          `json:"op"`
	Pod        string          `json:"pod"`
	Container  string          `json:"container"`
	Containers []vecContainer  `json:"containers,omitempty"`
	Hints      map[string]any  `json:"hints,omitempty"` // before allocating: GetTopologyHints
	Err        string          `json:"err,omitempty"`
	Blocks     []state.Block   `json:"blocks"`
	Machine    state.NUMANodeMap `json:"machine"`
}

type vecScenario struct {
	Machine vecMachine `json:"machine"`
	Steps   []vecStep  `json:"steps"`
}

func hintsJSON(h map[string][]topologymanager.TopologyHint) map[string]any {
	if h == nil {
		return nil
	}
	out := map[string]any{}
	for r, hs := range h {
		var l []string
		for _, x := range hs {
			l = append(l, fmt.Sprintf("%v:%v", x.NUMANodeAffinity.GetBits(), x.Preferred))
		}
		if l == nil {
			l = []string{}
		}
		out[r] = l
	}
	return out
}

func vecPod(uid string, cs []vecContainer) *v1.Pod {
	pod := &v1.Pod{}
	pod.UID = types.UID(uid)
	for _, c := range cs {
		rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: *resource.NewQuantity(int64(c.Memory), resource.BinarySI)}
		if c.Hugepages > 0 {
			rl["hugepages-2Mi"] = *resource.NewQuantity(int64(c.Hugepages), resource.BinarySI)
		}
		ctr := v1.Container{Name: c.Name, Resources: v1.ResourceRequirements{Requests: rl, Limits: rl}}
		if c.Init {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, ctr)
		} else {
			pod.Spec.Containers = append(pod.Spec.Containers, ctr)
		}
	}
	return pod
}

func TestZZWriteVectors(t *testing.T) {
	dir := os.Getenv("VECTORS_DIR")
	if dir == "" {
		t.Skip("VECTORS_DIR not set")
	}
	ctx := klog.NewContext(context.Background(), klog.Background())
	r := rand.New(rand.NewSource(42))
	var out []vecScenario
	for i := 0; i < 60; i++ {
		n := []int{1, 2, 4}[r.Intn(3)]
		m := vecMachine{}
		info := &cadvisorapi.MachineInfo{}
		reserved := systemReservedMemory{}
		for id := 0; id < n; id++ {
			mem := uint64(4+r.Intn(5)) * vecGiB
			pages := uint64(r.Intn(3)) * 256
			res := uint64(0)
			if id == 0 || r.Intn(2) == 0 {
				res = uint64(1+r.Intn(2)) * vecGiB / 2
			}
			m.Nodes, m.Hugepages, m.Reserved = append(m.Nodes, mem), append(m.Hugepages, pages), append(m.Reserved, res)
			info.Topology = append(info.Topology, cadvisorapi.Node{Id: id, Memory: mem, HugePages: []cadvisorapi.HugePagesInfo{{PageSize: 2048, NumPages: pages}}})
			reserved[id] = map[v1.ResourceName]uint64{v1.ResourceMemory: res}
		}
		aff := &vecAffinity{hints: map[string]topologymanager.TopologyHint{}}
		pol, err := NewPolicyStatic(ctx, info, reserved, aff)
		if err != nil {
			t.Fatal(err)
		}
		st := state.NewMemoryState(klog.Background())
		if err := pol.Start(ctx, st); err != nil {
			t.Fatal(err)
		}
		sc := vecScenario{Machine: m}
		type live struct {
			uid string
			cs  []vecContainer
		}
		var pods []live
		for step := 0; step < 7; step++ {
			if len(pods) > 0 && r.Intn(3) == 0 {
				p := pods[r.Intn(len(pods))]
				c := p.cs[r.Intn(len(p.cs))]
				pol.RemoveContainer(ctx, st, p.uid, c.Name)
				sc.Steps = append(sc.Steps, vecStep{Op: "remove", Pod: p.uid, Container: c.Name, Machine: st.GetMachineState()})
				continue
			}
			uid := fmt.Sprintf("pod%d", step)
			var cs []vecContainer
			nInit := r.Intn(2)
			for j := 0; j < nInit+1+r.Intn(2); j++ {
				c := vecContainer{Name: fmt.Sprintf("c%d", j), Init: j < nInit, Memory: uint64(1+r.Intn(10)) * vecGiB / 2}
				if r.Intn(4) == 0 {
					c.Hugepages = uint64(1+r.Intn(3)) * 128 << 20
				}
				if r.Intn(2) == 0 {
					mask := []int{r.Intn(n)}
					if n > 1 && r.Intn(3) == 0 {
						mask = []int{0, 1}
					}
					c.Hint, c.Preferred = mask, r.Intn(3) != 0
					bm, _ := bitmask.NewBitMask(mask...)
					aff.hints[uid+"/"+c.Name] = topologymanager.TopologyHint{NUMANodeAffinity: bm, Preferred: c.Preferred}
				}
				cs = append(cs, c)
			}
			pod := vecPod(uid, cs)
			pods = append(pods, live{uid, cs})
			all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
			for k := range all {
				c := &all[k]
				s := vecStep{Op: "allocate", Pod: uid, Container: c.Name}
				s.Hints = hintsJSON(pol.GetTopologyHints(ctx, st, pod, c))
				if err := pol.Allocate(ctx, st, pod, c); err != nil {
					s.Err = err.Error()
				}
				// Go appends blocks in map order: sorted here so the file is reproducible.
				s.Blocks = st.GetMemoryBlocks(uid, c.Name)
				sort.Slice(s.Blocks, func(i, j int) bool { return s.Blocks[i].Type < s.Blocks[j].Type })
				s.Machine = st.GetMachineState()
				if k == 0 {
					s.Containers = cs
				}
				sc.Steps = append(sc.Steps, s)
			}
		}
		out = append(out, sc)
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].Machine.Nodes) < len(out[j].Machine.Nodes) })
	b, err := json.Marshal(map[string]any{"scenarios": out})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memorymanager.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
