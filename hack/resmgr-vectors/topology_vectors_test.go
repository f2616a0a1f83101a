// Hint-merge vectors from the upstream topology manager policies.
package topologymanager

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
)

// A provider's answer: null (no map), or resource -> null | [] | hints.
type vecHint struct {
	Bits      []int `json:"bits"` // null: nil affinity
	Preferred bool  `json:"preferred"`
}

type vecProvider struct {
	Nil       bool                  `json:"nil,omitempty"`
	Resources map[string][]vecHint `json:"resources,omitempty"` // a null list: no preference
	Order     []string              `json:"order,omitempty"`     // iteration order used
}

type mergeVector struct {
	Nodes     []int         `json:"nodes"`
	Distances [][]uint64    `json:"distances,omitempty"`
	Policy    string        `json:"policy"`
	Closest   bool          `json:"preferClosest,omitempty"`
	Providers []vecProvider `json:"providers"`
	Result    vecHint       `json:"result"`
	Admit     bool          `json:"admit"`
}

func toHints(hs []vecHint) []TopologyHint {
	if hs == nil {
		return nil
	}
	out := []TopologyHint{}
	for _, h := range hs {
		var m bitmask.BitMask
		if h.Bits != nil {
			m, _ = bitmask.NewBitMask(h.Bits...)
		}
		out = append(out, TopologyHint{NUMANodeAffinity: m, Preferred: h.Preferred})
	}
	return out
}

func randomMask(r *rand.Rand, nodes []int) []int {
	var bits []int
	for len(bits) == 0 {
		for _, n := range nodes {
			if r.Intn(3) == 0 {
				bits = append(bits, n)
			}
		}
	}
	return bits
}

func TestZZWriteVectors(t *testing.T) {
	dir := os.Getenv("VECTORS_DIR")
	if dir == "" {
		t.Skip("VECTORS_DIR not set")
	}
	r := rand.New(rand.NewSource(7))
	layouts := [][]int{{0}, {0, 1}, {0, 1, 2, 3}, {0, 1, 2, 3, 4, 5, 6, 7}}
	var out []mergeVector
	for i := 0; i < 800; i++ {
		nodes := layouts[r.Intn(len(layouts))]
		v := mergeVector{Nodes: nodes, Policy: []string{PolicyBestEffort, PolicyRestricted, PolicySingleNumaNode}[r.Intn(3)]}
		dist := map[int][]uint64{}
		v.Closest = r.Intn(3) == 0
		for _, a := range nodes {
			row := []uint64{}
			for _, b := range nodes {
				d := uint64(10)
				if a != b {
					d = uint64(11 + (a+b)%3*5 + r.Intn(2)*10)
				}
				row = append(row, d)
			}
			dist[a] = row
			v.Distances = append(v.Distances, row)
		}
		var providersHints []map[string][]TopologyHint
		for p := 0; p < 1+r.Intn(3); p++ {
			vp := vecProvider{}
			if r.Intn(6) == 0 {
				vp.Nil = true
				providersHints = append(providersHints, nil)
				v.Providers = append(v.Providers, vp)
				continue
			}
			vp.Resources = map[string][]vecHint{}
			hints := map[string][]TopologyHint{}
			for res := 0; res < 1+r.Intn(2); res++ {
				name := fmt.Sprintf("r%d-%d", p, res)
				var hs []vecHint
				switch r.Intn(8) {
				case 0: // no preference
				case 1:
					hs = []vecHint{}
				default:
					for h := 0; h < 1+r.Intn(4); h++ {
						vh := vecHint{Bits: randomMask(r, nodes), Preferred: r.Intn(2) == 0}
						if r.Intn(10) == 0 {
							vh.Bits = nil
						}
						hs = append(hs, vh)
					}
				}
				vp.Resources[name] = hs
				vp.Order = append(vp.Order, name)
				hints[name] = toHints(hs)
			}
			providersHints = append(providersHints, hints)
			v.Providers = append(v.Providers, vp)
		}
		info := &NUMAInfo{Nodes: nodes, NUMADistances: dist}
		opts := PolicyOptions{PreferClosestNUMA: v.Closest, MaxAllowableNUMANodes: 8}
		var pol Policy
		switch v.Policy {
		case PolicyBestEffort:
			pol = NewBestEffortPolicy(info, opts)
		case PolicyRestricted:
			pol = NewRestrictedPolicy(info, opts)
		default:
			pol = NewSingleNumaNodePolicy(info, opts)
		}
		// The merge iterates each provider's map in Go's random order; fix the
		// order by merging over single-resource maps in v.Order instead.
		var ordered []map[string][]TopologyHint
		for pi, ph := range providersHints {
			if ph == nil {
				ordered = append(ordered, nil)
				continue
			}
			for _, name := range v.Providers[pi].Order {
				ordered = append(ordered, map[string][]TopologyHint{name: ph[name]})
			}
		}
		best, admit := pol.Merge(ordered)
		if best.NUMANodeAffinity != nil {
			v.Result.Bits = best.NUMANodeAffinity.GetBits()
			if v.Result.Bits == nil {
				v.Result.Bits = []int{}
			}
		}
		v.Result.Preferred, v.Admit = best.Preferred, admit
		out = append(out, v)
	}
	b, _ := json.Marshal(map[string]any{"merge": out})
	if err := os.WriteFile(filepath.Join(dir, "topologymanager.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
