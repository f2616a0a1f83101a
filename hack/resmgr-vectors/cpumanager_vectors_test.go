// Test vectors from the upstream CPU manager for kubelet-py's port.
// gen.sh copies this file into package cpumanager of the pinned k8s.io/kubernetes
// module (a private symlinked copy) and runs it; it calls the real unexported
// functions and writes JSON facts (topologies, inputs, results) to $VECTORS_DIR.
package cpumanager

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
	"k8s.io/utils/cpuset"
)

type vecTopo struct {
	NumCPUs        int               `json:"numCPUs"`
	NumCores       int               `json:"numCores"`
	NumUncoreCache int               `json:"numUncoreCache"`
	NumSockets     int               `json:"numSockets"`
	NumNUMANodes   int               `json:"numNUMANodes"`
	Details        map[string][4]int `json:"details"` // cpu -> numa, socket, core, uncore
}

func vecTopology(t *topology.CPUTopology) vecTopo {
	d := map[string][4]int{}
	for cpu, i := range t.CPUDetails {
		d[fmt.Sprint(cpu)] = [4]int{i.NUMANodeID, i.SocketID, i.CoreID, i.UncoreCacheID}
	}
	return vecTopo{t.NumCPUs, t.NumCores, t.NumUncoreCache, t.NumSockets, t.NumNUMANodes, d}
}

var vecTopologies = map[string]*topology.CPUTopology{
	"SingleSocketHT":                             topoSingleSocketHT,
	"DualSocketHT":                               topoDualSocketHT,
	"UncoreDualSocketNoSMT":                      topoUncoreDualSocketNoSMT,
	"UncoreSingleSocketMultiNuma":                topoUncoreSingleSocketMultiNuma,
	"UncoreSingleSocketSMT":                      topoUncoreSingleSocketSMT,
	"UncoreSingleSocketNoSMT":                    topoUncoreSingleSocketNoSMT,
	"DualSocketNoHT":                             topoDualSocketNoHT,
	"TripleSocketHT":                             topoTripleSocketHT,
	"QuadSocketFourWayHT":                        topoQuadSocketFourWayHT,
	"DualSocketMultiNumaPerSocketHT":             topoDualSocketMultiNumaPerSocketHT,
	"DualSocketMultiNumaPerSocketHTLarge":        topoDualSocketMultiNumaPerSocketHTLarge,
	"DualSocketSingleNumaPerSocketSMTUncore":     topoDualSocketSingleNumaPerSocketSMTUncore,
	"SmallDualSocketSingleNumaPerSocketNoSMTUncore": topoSmallDualSocketSingleNumaPerSocketNoSMTUncore,
	"LargeSingleSocketSingleNumaPerSocketSMTUncore": topoLargeSingleSocketSingleNumaPerSocketSMTUncore,
	"DualSocketMultiNumaPerSocketUncore":         topoDualSocketMultiNumaPerSocketUncore,
	"DualSocketSubNumaPerSocketHTMonolithicUncore": topoDualSocketSubNumaPerSocketHTMonolithicUncore,
}

func vecNames() []string {
	var names []string
	for n := range vecTopologies {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func randomSubset(r *rand.Rand, all cpuset.CPUSet) cpuset.CPUSet {
	p := 0.3 + 0.7*r.Float64()
	if r.Intn(4) == 0 {
		p = 1
	}
	var out []int
	for _, c := range all.List() {
		if r.Float64() < p {
			out = append(out, c)
		}
	}
	return cpuset.New(out...)
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

type takeVector struct {
	Topology  string `json:"topology"`
	Available string `json:"available"`
	NumCPUs   int    `json:"numCPUs"`
	Spread    bool   `json:"spread,omitempty"`
	Uncore    bool   `json:"uncore,omitempty"`
	Group     int    `json:"group,omitempty"` // distributed only
	Result    string `json:"result"`
	Err       string `json:"err,omitempty"`
	Hang      bool   `json:"hang,omitempty"` // upstream never returned (see below)
}

// wholeCores keeps only CPUs whose every core sibling is in the set.
func wholeCores(topo *topology.CPUTopology, s cpuset.CPUSet) cpuset.CPUSet {
	var out []int
	for _, c := range s.List() {
		core := topo.CPUDetails[c].CoreID
		if topo.CPUDetails.CPUsInCores(core).IsSubsetOf(s) {
			out = append(out, c)
		}
	}
	return cpuset.New(out...)
}

// withTimeout runs f, giving up after d: upstream's distributed allocation
// loops forever when a remainder cannot be placed in groups (odd free counts
// per NUMA node with a group of 2). The goroutine then spins until the test
// binary exits; a few of them are recorded as facts and no more are tried.
func withTimeout(d time.Duration, f func() (cpuset.CPUSet, error)) (cpuset.CPUSet, error, bool) {
	type res struct {
		s   cpuset.CPUSet
		err error
	}
	ch := make(chan res, 1)
	go func() { s, err := f(); ch <- res{s, err} }()
	select {
	case r := <-ch:
		return r.s, r.err, false
	case <-time.After(d):
		return cpuset.New(), nil, true
	}
}

func takeVectors(r *rand.Rand, distributed bool, perTopo int) []takeVector {
	var out []takeVector
	hangs := 0
	for _, name := range vecNames() {
		topo := vecTopologies[name]
		for i := 0; i < perTopo; i++ {
			avail := randomSubset(r, topo.CPUDetails.CPUs())
			n := r.Intn(avail.Size() + 2)
			v := takeVector{Topology: name, Available: avail.String(), NumCPUs: n}
			var res cpuset.CPUSet
			var err error
			if distributed {
				v.Group = 1
				if r.Intn(2) == 0 {
					v.Group = topo.CPUsPerCore()
				}
				odd := v.Group > 1 && hangs < 3 && r.Intn(5) == 0
				if v.Group > 1 && !odd {
					avail = wholeCores(topo, avail)
					v.Available, n = avail.String(), r.Intn(avail.Size()+2)
					v.NumCPUs = n
				}
				var hang bool
				res, err, hang = withTimeout(5*time.Second, func() (cpuset.CPUSet, error) {
					return takeByTopologyNUMADistributed(topo, avail, n, v.Group, CPUSortingStrategyPacked)
				})
				if hang {
					hangs++
					v.Hang = true
				}
			} else {
				v.Spread = r.Intn(4) == 0
				v.Uncore = !v.Spread && r.Intn(3) == 0
				s := CPUSortingStrategyPacked
				if v.Spread {
					s = CPUSortingStrategySpread
				}
				res, err = takeByTopologyNUMAPacked(topo, avail, n, s, v.Uncore)
			}
			v.Result, v.Err = res.String(), errText(err)
			out = append(out, v)
		}
	}
	return out
}

type hintVector struct {
	Topology    string   `json:"topology"`
	Available   string   `json:"available"`
	Reusable    string   `json:"reusable"`
	Request     int      `json:"request"`
	AlignSocket bool     `json:"alignBySocket,omitempty"`
	Hints       []string `json:"hints"` // "<bits>:<preferred>"
}

func hintString(h topologymanager.TopologyHint) string {
	return fmt.Sprintf("%v:%v", h.NUMANodeAffinity.GetBits(), h.Preferred)
}

func hintVectors(r *rand.Rand, perTopo int) []hintVector {
	var out []hintVector
	for _, name := range vecNames() {
		topo := vecTopologies[name]
		for i := 0; i < perTopo; i++ {
			p := &staticPolicy{topology: topo, cpuGroupSize: topo.CPUsPerCore()}
			p.options.AlignBySocket = topo.NumSockets <= topo.NumNUMANodes && r.Intn(2) == 0
			avail := randomSubset(r, topo.CPUDetails.CPUs())
			reusable := cpuset.New()
			if r.Intn(3) == 0 {
				reusable = randomSubset(r, topo.CPUDetails.CPUs().Difference(avail))
				if reusable.Size() > 4 {
					reusable = cpuset.New(reusable.List()[:4]...)
				}
			}
			req := 1 + r.Intn(topo.CPUDetails.CPUs().Size())
			v := hintVector{Topology: name, Available: avail.String(), Reusable: reusable.String(), Request: req, AlignSocket: p.options.AlignBySocket}
			v.Hints = []string{}
			for _, h := range p.generateCPUTopologyHints(avail, reusable, req) {
				v.Hints = append(v.Hints, hintString(h))
			}
			out = append(out, v)
		}
	}
	return out
}

// ---- whole static-policy scenarios: Allocate / RemoveContainer sequences

type fixedAffinity struct {
	hints  map[string]topologymanager.TopologyHint
	policy topologymanager.Policy
}

func (f *fixedAffinity) GetAffinity(podUID, name string) topologymanager.TopologyHint {
	return f.hints[podUID+"/"+name]
}
func (f *fixedAffinity) GetPolicy() topologymanager.Policy { return f.policy }

type vecContainer struct {
	Name    string `json:"name"`
	CPU     string `json:"cpu"` // request == limit
	Init    bool   `json:"init,omitempty"`
	Sidecar bool   `json:"sidecar,omitempty"`
	Hint    []int  `json:"hint,omitempty"` // NUMA affinity the topology manager chose (nil: none)
}

type vecStep struct {
	Op         string         `json:"op"` // allocate | remove
	Pod        string         `json:"pod"`
	Containers []vecContainer `json:"containers,omitempty"`
	Container  string         `json:"container,omitempty"` // allocate: which one; remove: which one
	Err        string         `json:"err,omitempty"`
	Default    string         `json:"default"`
	Assigned   string         `json:"assigned,omitempty"` // the container's set after the step
}

type scenario struct {
	Topology    string            `json:"topology"`
	NumReserved int               `json:"numReserved"`
	Reserved    string            `json:"reservedCPUs"`
	Options     map[string]string `json:"options"`
	PolicyErr   string            `json:"policyErr,omitempty"`
	Steps       []vecStep         `json:"steps"`
}

func vecPod(uid string, cs []vecContainer) *v1.Pod {
	pod := &v1.Pod{}
	pod.UID = types.UID(uid)
	pod.Name = uid
	for _, c := range cs {
		rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse(c.CPU), v1.ResourceMemory: resource.MustParse("1Gi")}
		ctr := v1.Container{Name: c.Name, Resources: v1.ResourceRequirements{Requests: rl, Limits: rl}}
		if c.Sidecar {
			always := v1.ContainerRestartPolicyAlways
			ctr.RestartPolicy = &always
		}
		if c.Init {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, ctr)
		} else {
			pod.Spec.Containers = append(pod.Spec.Containers, ctr)
		}
	}
	return pod
}

func randomOptions(r *rand.Rand) map[string]string {
	opts := map[string]string{}
	for _, o := range []string{FullPCPUsOnlyOption, DistributeCPUsAcrossNUMAOption, DistributeCPUsAcrossCoresOption, StrictCPUReservationOption, PreferAlignByUnCoreCacheOption} {
		if r.Intn(4) == 0 {
			opts[o] = "true"
		}
	}
	// Together these can hang upstream's allocation (see withTimeout).
	if opts[FullPCPUsOnlyOption] != "" && opts[DistributeCPUsAcrossNUMAOption] != "" {
		delete(opts, DistributeCPUsAcrossNUMAOption)
	}
	return opts
}

func scenarios(r *rand.Rand, count int) []scenario {
	var out []scenario
	names := vecNames()
	for i := 0; i < count; i++ {
		name := names[r.Intn(len(names))]
		topo := vecTopologies[name]
		sc := scenario{Topology: name, NumReserved: 1 + r.Intn(3), Options: randomOptions(r), Reserved: ""}
		reserved := cpuset.New()
		if r.Intn(3) == 0 {
			reserved = cpuset.New(topo.CPUDetails.CPUs().List()[r.Intn(topo.NumCPUs)])
			sc.NumReserved = 1
			sc.Reserved = reserved.String()
		}
		aff := &fixedAffinity{hints: map[string]topologymanager.TopologyHint{}, policy: topologymanager.NewNonePolicy()}
		opts, err := NewStaticPolicyOptions(sc.Options)
		var pol Policy
		if err == nil {
			pol, err = newStaticPolicyWithOptions(topo, sc.NumReserved, reserved, aff, opts)
		}
		if err != nil {
			sc.PolicyErr = err.Error()
			out = append(out, sc)
			continue
		}
		st := state.NewMemoryState()
		if err := pol.Start(st); err != nil {
			sc.PolicyErr = "start: " + err.Error()
			out = append(out, sc)
			continue
		}
		type live struct {
			uid string
			cs  []vecContainer
		}
		var pods []live
		for step := 0; step < 8; step++ {
			if len(pods) > 0 && r.Intn(3) == 0 {
				p := pods[r.Intn(len(pods))]
				c := p.cs[r.Intn(len(p.cs))]
				_ = pol.RemoveContainer(st, p.uid, c.Name)
				sc.Steps = append(sc.Steps, vecStep{Op: "remove", Pod: p.uid, Container: c.Name, Default: st.GetDefaultCPUSet().String()})
				continue
			}
			uid := fmt.Sprintf("pod%d", step)
			var cs []vecContainer
			nInit := r.Intn(2)
			for j := 0; j < nInit+1+r.Intn(2); j++ {
				c := vecContainer{Name: fmt.Sprintf("c%d", j), Init: j < nInit}
				c.Sidecar = c.Init && r.Intn(3) == 0
				cpu := 1 + r.Intn(4)
				if r.Intn(6) == 0 {
					c.CPU = "500m"
				} else {
					c.CPU = fmt.Sprint(cpu)
				}
				if r.Intn(2) == 0 {
					nodes := topo.CPUDetails.NUMANodes().List()
					mask := []int{nodes[r.Intn(len(nodes))]}
					if r.Intn(3) == 0 && len(nodes) > 1 {
						mask = nodes[:2]
					}
					c.Hint = mask
					bm, _ := bitmask.NewBitMask(mask...)
					aff.hints[uid+"/"+c.Name] = topologymanager.TopologyHint{NUMANodeAffinity: bm, Preferred: true}
				}
				cs = append(cs, c)
			}
			pod := vecPod(uid, cs)
			pods = append(pods, live{uid, cs})
			all := append(append([]v1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
			for k := range all {
				c := &all[k]
				err := pol.Allocate(st, pod, c)
				s := vecStep{Op: "allocate", Pod: uid, Container: c.Name, Err: errText(err), Default: st.GetDefaultCPUSet().String()}
				if cset, ok := st.GetCPUSet(uid, c.Name); ok {
					s.Assigned = cset.String()
				}
				if k == 0 {
					s.Containers = cs
				}
				sc.Steps = append(sc.Steps, s)
			}
		}
		out = append(out, sc)
	}
	return out
}

// newStaticPolicyWithOptions is NewStaticPolicy with parsed options, so alpha
// options need no feature gate here.
func newStaticPolicyWithOptions(topo *topology.CPUTopology, numReserved int, reserved cpuset.CPUSet, aff topologymanager.Store, opts StaticPolicyOptions) (Policy, error) {
	p := &staticPolicy{topology: topo, affinity: aff, cpusToReuse: map[string]cpuset.CPUSet{}, options: opts, cpuGroupSize: topo.CPUsPerCore()}
	if reserved.Size() == 0 {
		reserved, _ = p.takeByTopology(topo.CPUDetails.CPUs(), numReserved)
	}
	if reserved.Size() != numReserved {
		return nil, fmt.Errorf("[cpumanager] unable to reserve the required amount of CPUs (size of %s did not equal %d)", reserved, numReserved)
	}
	var phys cpuset.CPUSet
	for _, cpu := range reserved.UnsortedList() {
		core, _ := topo.CPUCoreID(cpu)
		phys = phys.Union(topo.CPUDetails.CPUsInCores(core))
	}
	p.reservedCPUs, p.reservedPhysicalCPUs = reserved, phys
	return p, nil
}

func TestZZWriteVectors(t *testing.T) {
	dir := os.Getenv("VECTORS_DIR")
	if dir == "" {
		t.Skip("VECTORS_DIR not set")
	}
	// Alpha options (distribute-cpus-across-cores, align-by-socket) take part too.
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.CPUManagerPolicyAlphaOptions, true)
	r := rand.New(rand.NewSource(20250401))
	topos := map[string]vecTopo{}
	for _, n := range vecNames() {
		topos[n] = vecTopology(vecTopologies[n])
	}
	doc := map[string]any{
		"topologies":  topos,
		"packed":      takeVectors(r, false, 40),
		"distributed": takeVectors(r, true, 25),
		"hints":       hintVectors(r, 15),
		"scenarios":   scenarios(r, 120),
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpumanager.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
