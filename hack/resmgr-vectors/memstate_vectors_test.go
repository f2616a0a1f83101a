// Checkpoint vectors for memory_manager_state (see cpustate_vectors_test.go).
package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/klog/v2"
)

type memVector struct {
	Name     string `json:"name"`
	JSON     string `json:"json"`
	Spew     string `json:"spew"`
	Checksum uint64 `json:"checksum"`
}

func twoNodes() NUMANodeMap {
	return NUMANodeMap{
		0: {NumberOfAssignments: 2, Cells: []int{0, 1}, MemoryMap: map[v1.ResourceName]*MemoryTable{
			v1.ResourceMemory:      {TotalMemSize: 17179869184, SystemReserved: 1073741824, Allocatable: 16106127360, Reserved: 16106127360, Free: 0},
			"hugepages-2Mi":        {TotalMemSize: 1073741824, SystemReserved: 0, Allocatable: 1073741824, Reserved: 0, Free: 1073741824},
		}},
		1: {NumberOfAssignments: 2, Cells: []int{0, 1}, MemoryMap: map[v1.ResourceName]*MemoryTable{
			v1.ResourceMemory:      {TotalMemSize: 17179869184, SystemReserved: 0, Allocatable: 17179869184, Reserved: 2147483648, Free: 15032385536},
			"hugepages-2Mi":        {TotalMemSize: 0, SystemReserved: 0, Allocatable: 0, Reserved: 0, Free: 0},
		}},
	}
}

func TestZZWriteVectors(t *testing.T) {
	dir := os.Getenv("VECTORS_DIR")
	if dir == "" {
		t.Skip("VECTORS_DIR not set")
	}
	mk := func(name, policy string, ms NUMANodeMap, entries ContainerMemoryAssignments) memVector {
		cp := NewMemoryManagerCheckpoint()
		cp.PolicyName = policy
		if ms != nil {
			cp.MachineState = ms
		}
		if entries != nil {
			cp.Entries = entries
		}
		spew := dump.ForHash(cp)
		b, err := cp.MarshalCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		return memVector{name, string(b), spew, uint64(cp.Checksum)}
	}
	cases := []memVector{
		mk("none", "None", nil, nil),
		mk("static-fresh", "Static", NUMANodeMap{0: {NumberOfAssignments: 0, Cells: []int{0}, MemoryMap: map[v1.ResourceName]*MemoryTable{
			v1.ResourceMemory: {TotalMemSize: 25769803776, SystemReserved: 104857600, Allocatable: 25664946176, Free: 25664946176},
		}}}, nil),
		mk("static-group", "Static", twoNodes(), ContainerMemoryAssignments{
			"pod-a": {"app": {{NUMAAffinity: []int{0, 1}, Type: v1.ResourceMemory, Size: 18253611008}}},
			"pod-b": {"init": {{NUMAAffinity: []int{0, 1}, Type: v1.ResourceMemory, Size: 0}, {NUMAAffinity: []int{0, 1}, Type: "hugepages-2Mi", Size: 0}}, "<x>&": nil},
		}),
		mk("nil-cells-and-map", "Static", NUMANodeMap{3: {NumberOfAssignments: 1}, 10: nil}, nil),
	}

	tmp := t.TempDir()
	sc, err := NewCheckpointState(klog.Background(), tmp, "memory_manager_state", "Static")
	if err != nil {
		t.Fatal(err)
	}
	sc.SetMachineState(twoNodes())
	sc.SetMemoryBlocks("pod-a", "app", []Block{{NUMAAffinity: []int{0, 1}, Type: v1.ResourceMemory, Size: 18253611008}})
	written, _ := os.ReadFile(filepath.Join(tmp, "memory_manager_state"))

	doc := map[string]any{"cases": cases, "upstreamFile": string(written)}
	b, _ := json.MarshalIndent(doc, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "memory_checkpoint.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestZZReadDirMemory: $READ_DIR/<case>/memory_manager_state read by upstream.
func TestZZReadDirMemory(t *testing.T) {
	dir := os.Getenv("READ_DIR")
	if dir == "" {
		t.Skip("READ_DIR not set")
	}
	entries, _ := os.ReadDir(dir)
	out := map[string]any{}
	for _, e := range entries {
		d := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(d, "memory_manager_state")); err != nil {
			continue
		}
		policy, _ := os.ReadFile(filepath.Join(d, "policy"))
		st, err := NewCheckpointState(klog.Background(), d, "memory_manager_state", string(policy))
		if err != nil {
			out[e.Name()] = map[string]string{"error": err.Error()}
			continue
		}
		out[e.Name()] = map[string]any{"machineState": st.GetMachineState(), "entries": st.GetMemoryAssignments()}
	}
	b, _ := json.MarshalIndent(out, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "upstream-read-memory.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
