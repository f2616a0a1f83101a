// Checkpoint vectors for cpu_manager_state: upstream's JSON bytes, spew text
// and checksum for chosen contents, a file written through upstream's
// stateCheckpoint, and (TestZZReadDir) upstream reading files kubelet-py wrote.
package state

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/dump"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/utils/cpuset"
)

type cpuVector struct {
	Name     string                       `json:"name"`
	Policy   string                       `json:"policyName"`
	Default  string                       `json:"defaultCpuSet"`
	Entries  map[string]map[string]string `json:"entries"`
	NilEntry bool                         `json:"nilEntries,omitempty"`
	JSON     string                       `json:"json"`
	Spew     string                       `json:"spew"`
	Checksum uint64                       `json:"checksum"`
}

func TestZZWriteVectors(t *testing.T) {
	dir := os.Getenv("VECTORS_DIR")
	if dir == "" {
		t.Skip("VECTORS_DIR not set")
	}
	cases := []cpuVector{
		{Name: "none-empty", Policy: "none"},
		{Name: "static-fresh", Policy: "static", Default: "0-1"},
		{Name: "static-one", Policy: "static", Default: "0,2-7", Entries: map[string]map[string]string{"6f2c1b9e-0000-4000-8000-000000000001": {"app": "1"}}},
		{Name: "static-many", Policy: "static", Default: "0-1,12-13", Entries: map[string]map[string]string{
			"b-pod": {"sidecar": "4-5", "main": "2-3,6-11", "init": "2-3"},
			"a-pod": {"c": "14-15"},
			"c-pod": {},
		}},
		{Name: "html-and-unicode", Policy: "static", Default: "0", Entries: map[string]map[string]string{"<pod>&\"x\"": {"ctr\u2028é漢": "1"}}},
		{Name: "nil-entries", Policy: "static", Default: "0-3", NilEntry: true},
	}
	for i := range cases {
		c := &cases[i]
		cp := NewCPUManagerCheckpoint()
		cp.PolicyName, cp.DefaultCPUSet = c.Policy, c.Default
		if c.NilEntry {
			cp.Entries = nil
		}
		for p, cs := range c.Entries {
			cp.Entries[p] = map[string]string{}
			for n, s := range cs {
				cp.Entries[p][n] = s
			}
		}
		c.Spew = dump.ForHash(cp)
		b, err := cp.MarshalCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		c.JSON, c.Checksum = string(b), uint64(cp.Checksum)
	}
	// A v1 file as a pre-1.18 kubelet wrote it: its struct was then named
	// CPUManagerCheckpoint, which is the name VerifyChecksum hashes v1 under.
	v1 := newCPUManagerCheckpointV1()
	v1.PolicyName, v1.DefaultCPUSet = "static", "0,3"
	v1.Entries["containerid-1"] = "1-2"
	legacy := strings.Replace(dump.ForHash(v1), "CPUManagerCheckpointV1", "CPUManagerCheckpoint", 1)
	h := fnv.New32a()
	fmt.Fprintf(h, "%v", legacy)
	v1.Checksum = checksum.Checksum(h.Sum32())
	v1JSON, _ := json.Marshal(*v1)
	v1dir := t.TempDir()
	_ = os.WriteFile(filepath.Join(v1dir, "cpu_manager_state"), v1JSON, 0o600)
	cm := containermap.NewContainerMap()
	cm.Add("pod-x", "ctr", "containerid-1")
	v1st, err := NewCheckpointState(v1dir, "cpu_manager_state", "static", cm)
	if err != nil {
		t.Fatalf("upstream refuses the v1 vector: %v", err)
	}
	v1cs, _ := v1st.GetCPUSet("pod-x", "ctr")
	migrated, _ := os.ReadFile(filepath.Join(v1dir, "cpu_manager_state"))

	// A file as the Go kubelet leaves it after two allocations.
	tmp := t.TempDir()
	sc, err := NewCheckpointState(tmp, "cpu_manager_state", "static", containermap.NewContainerMap())
	if err != nil {
		t.Fatal(err)
	}
	sc.SetDefaultCPUSet(cpuset.New(0, 1, 2, 3, 4, 5, 6, 7))
	sc.SetCPUSet("pod-a", "app", cpuset.New(2, 3))
	sc.SetDefaultCPUSet(cpuset.New(0, 1, 4, 5, 6, 7))
	sc.SetCPUSet("pod-b", "web", cpuset.New(6))
	sc.SetDefaultCPUSet(cpuset.New(0, 1, 4, 5, 7))
	written, _ := os.ReadFile(filepath.Join(tmp, "cpu_manager_state"))

	doc := map[string]any{
		"v2": cases, "v1": string(v1JSON), "v1Restored": v1cs.String(), "v1After": string(migrated),
		"upstreamFile": string(written),
	}
	b, _ := json.MarshalIndent(doc, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "cpu_checkpoint.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestZZReadDir: every $READ_DIR/<case>/cpu_manager_state read by upstream's
// NewCheckpointState with the policy named in $READ_DIR/<case>/policy.
func TestZZReadDir(t *testing.T) {
	dir := os.Getenv("READ_DIR")
	if dir == "" {
		t.Skip("READ_DIR not set")
	}
	entries, _ := os.ReadDir(dir)
	out := map[string]any{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		d := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(d, "cpu_manager_state")); err != nil {
			continue
		}
		policy, _ := os.ReadFile(filepath.Join(d, "policy"))
		st, err := NewCheckpointState(d, "cpu_manager_state", string(policy), containermap.NewContainerMap())
		if err != nil {
			out[e.Name()] = map[string]string{"error": err.Error()}
			continue
		}
		assignments := map[string]map[string]string{}
		for pod, cs := range st.GetCPUAssignments() {
			assignments[pod] = map[string]string{}
			for n, s := range cs {
				assignments[pod][n] = s.String()
			}
		}
		out[e.Name()] = map[string]any{"default": st.GetDefaultCPUSet().String(), "entries": assignments}
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b, _ := json.MarshalIndent(out, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "upstream-read-cpu.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
