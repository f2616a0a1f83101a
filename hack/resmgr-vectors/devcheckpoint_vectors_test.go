// Checkpoint vectors for the device manager's kubelet_internal_checkpoint:
// upstream's JSON bytes, spew text and checksum for chosen contents, each
// Allocate answer given as upstream marshals it.
package checkpoint

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/dump"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type devVector struct {
	Name     string `json:"name"`
	JSON     string `json:"json"`
	Spew     string `json:"spew"`
	Checksum uint64 `json:"checksum"`
}

func resp(id string) []byte {
	r := &pluginapi.ContainerAllocateResponse{
		Envs:        map[string]string{"DEV": id, "A<&>": "x"},
		Mounts:      []*pluginapi.Mount{{ContainerPath: "/c/" + id, HostPath: "/h/" + id, ReadOnly: true}},
		Devices:     []*pluginapi.DeviceSpec{{ContainerPath: "/dev/" + id, HostPath: "/dev/null", Permissions: "rw"}},
		Annotations: map[string]string{"a": id},
		CdiDevices:  []*pluginapi.CDIDevice{{Name: "vendor.com/dev=" + id}},
	}
	b, err := proto.Marshal(r)
	if err != nil {
		panic(err)
	}
	return b
}

func TestZZWriteVectors(t *testing.T) {
	dir := os.Getenv("VECTORS_DIR")
	if dir == "" {
		t.Skip("VECTORS_DIR not set")
	}
	type tc struct {
		name    string
		entries []PodDevicesEntry
		reg     map[string][]string
	}
	cases := []tc{
		{"empty", nil, map[string][]string{}},
		{"registered-only", nil, map[string][]string{"example.com/gpu": {"b", "a"}, "vendor.io/nic": {}}},
		{"one", []PodDevicesEntry{{PodUID: "6f2c1b9e-0000-4000-8000-000000000001", ContainerName: "app",
			ResourceName: "example.com/gpu", DeviceIDs: DevicesPerNUMA{-1: {"a"}, 0: {"b", "c"}}, AllocResp: resp("a")}},
			map[string][]string{"example.com/gpu": {"a", "b", "c"}}},
		{"many", []PodDevicesEntry{
			{PodUID: "pod-<b>&", ContainerName: "ctr\u2028é", ResourceName: "example.com/gpu",
				DeviceIDs: DevicesPerNUMA{10: {"x"}, 2: {"y"}, 1: {"z"}}, AllocResp: resp("x")},
			{PodUID: "pod-a", ContainerName: "init", ResourceName: "vendor.io/nic",
				DeviceIDs: DevicesPerNUMA{}, AllocResp: []byte{}},
		}, map[string][]string{"example.com/gpu": {"x", "y", "z"}, "vendor.io/nic": nil}},
	}
	var out []devVector
	for _, c := range cases {
		cp := New(c.entries, c.reg).(*Data)
		b, err := cp.MarshalCheckpoint()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, devVector{Name: c.name, JSON: string(b), Spew: dump.ForHash(cp.Data), Checksum: uint64(cp.Checksum)})
		// Read back as upstream's manager reads it.
		back := New(make([]PodDevicesEntry, 0), make(map[string][]string)).(*Data)
		if err := back.UnmarshalCheckpoint(b); err != nil {
			t.Fatal(err)
		}
		if err := back.VerifyChecksum(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	doc := map[string]any{"vectors": out, "respA": base64.StdEncoding.EncodeToString(resp("a"))}
	b, _ := json.MarshalIndent(doc, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "device_checkpoint.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
