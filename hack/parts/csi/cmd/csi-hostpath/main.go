// Command csi-hostpath is kubelet-py's test CSI driver: volumes are
// directories under a state dir, staged and published with bind mounts. It
// serves the Identity, Controller and Node services on one socket, so one
// process is the whole driver on a one-node cluster (as the upstream
// csi-driver-host-path is deployed), and it does what a real node plugin does
// to the kubelet's paths: NodeStage mounts at the staging path the kubelet
// chose, NodePublish mounts at the pod's target path, stats and expansion are
// answered, and every call is checked the way the CSI spec asks (csi-sanity
// from csi-test runs against it).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

const vendorVersion = "0.1.0"

type driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	name           string
	nodeID         string
	topologyKey    string
	maxVolumes     int64
	attachRequired bool
	defaultSize    int64
	store          *store
}

func main() {
	endpoint := flag.String("endpoint", "unix:///csi/csi.sock", "the CSI socket (unix://PATH)")
	name := flag.String("drivername", "hostpath.csi.kubeletpy.local", "the driver's name")
	nodeID := flag.String("nodeid", "", "this node's ID (the Node name)")
	stateDir := flag.String("statedir", "/csi-data", "where volumes and their records live")
	maxVolumes := flag.Int64("max-volumes-per-node", 0, "NodeGetInfo's max_volumes_per_node (0: no limit)")
	attach := flag.Bool("attach-required", false, "offer ControllerPublishVolume (the CO then waits for attach)")
	topologyKey := flag.String("topology-key", "topology.hostpath.csi.kubeletpy.local/node", "the topology segment key")
	createVolume := flag.String("create-volume", "", "create a volume of this name in the state dir, print its ID and exit (for tests without a provisioner)")
	size := flag.Int64("size", 1<<30, "with --create-volume: its capacity in bytes")
	block := flag.Bool("block", false, "with --create-volume: a block volume (a file attached to a loop device while staged)")
	flag.Parse()
	st, err := newStore(*stateDir)
	if err != nil {
		log.Fatalf("state dir %s: %v", *stateDir, err)
	}
	if *createVolume != "" {
		st.mu.Lock()
		v := &volumeRecord{ID: idForName(*createVolume), Name: *createVolume, Capacity: *size, Block: *block}
		if err := st.create(v); err != nil {
			log.Fatalf("creating volume: %v", err)
		}
		st.mu.Unlock()
		fmt.Println(v.ID)
		return
	}
	if *nodeID == "" {
		log.Fatal("--nodeid is required")
	}
	d := &driver{
		name: *name, nodeID: *nodeID, topologyKey: *topologyKey, maxVolumes: *maxVolumes,
		attachRequired: *attach, defaultSize: 1 << 30, store: st,
	}
	path := strings.TrimPrefix(*endpoint, "unix://")
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		log.Fatalf("removing stale socket %s: %v", path, err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		log.Fatalf("listen on %s: %v", path, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(srv, d)
	csi.RegisterControllerServer(srv, d)
	csi.RegisterNodeServer(srv, d)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		srv.GracefulStop()
	}()
	log.Printf("%s %s serving on %s (node %s, attach required: %v)", d.name, vendorVersion, path, d.nodeID, d.attachRequired)
	if err := srv.Serve(lis); err != nil {
		log.Fatalf("serve: %v", err)
	}
	_ = os.Remove(path)
}

// logCalls logs each call and its outcome, without secrets.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err != nil {
		log.Printf("%s: %v", info.FullMethod, err)
	} else if !strings.HasSuffix(info.FullMethod, "/Probe") {
		log.Printf("%s ok", info.FullMethod)
	}
	return resp, err
}

func (d *driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: vendorVersion}, nil
}

func (d *driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	svc := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{
		svc(csi.PluginCapability_Service_CONTROLLER_SERVICE),
		svc(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS),
		{Type: &csi.PluginCapability_VolumeExpansion_{VolumeExpansion: &csi.PluginCapability_VolumeExpansion{
			Type: csi.PluginCapability_VolumeExpansion_ONLINE,
		}}},
	}}, nil
}

func (d *driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

func (d *driver) topology() *csi.Topology {
	return &csi.Topology{Segments: map[string]string{d.topologyKey: d.nodeID}}
}
