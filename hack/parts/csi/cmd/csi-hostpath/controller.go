package main

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The access modes a directory on one node can honour.
var singleNodeModes = map[csi.VolumeCapability_AccessMode_Mode]bool{
	csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER:        true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:   true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER: true,
	csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:  true,
}

// checkCapabilities returns "" when every capability can be served, else why not.
func checkCapabilities(caps []*csi.VolumeCapability) string {
	for _, c := range caps {
		if c.GetMount() == nil && c.GetBlock() == nil {
			return "access type must be mount or block"
		}
		if c.GetAccessMode() == nil || !singleNodeModes[c.GetAccessMode().GetMode()] {
			return "only single-node access modes are offered"
		}
	}
	return ""
}

// blockAccess says whether the capabilities ask for a block volume; a volume
// is one or the other, so a mix is refused.
func blockAccess(caps []*csi.VolumeCapability) (bool, string) {
	block := 0
	for _, c := range caps {
		if c.GetBlock() != nil {
			block++
		}
	}
	if block > 0 && block < len(caps) {
		return false, "a volume is either block or mount, not both"
	}
	return block > 0, ""
}

// checkAccessType refuses a capability whose access type is not the volume's.
func checkAccessType(v *volumeRecord, c *csi.VolumeCapability) error {
	if v.Block && c.GetBlock() == nil {
		return status.Errorf(codes.InvalidArgument, "volume %s is a block volume: access type must be block", v.ID)
	}
	if !v.Block && c.GetBlock() != nil {
		return status.Errorf(codes.InvalidArgument, "volume %s is not a block volume: access type must be mount", v.ID)
	}
	return nil
}

func (d *driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	types := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
		csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	}
	if d.attachRequired {
		types = append(types, csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME)
	}
	var out []*csi.ControllerServiceCapability
	for _, t := range types {
		out = append(out, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: out}, nil
}

func requestedSize(r *csi.CapacityRange, def int64) (int64, error) {
	if r == nil {
		return def, nil
	}
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 || (lim > 0 && req > lim) {
		return 0, status.Error(codes.OutOfRange, "invalid capacity range")
	}
	if req > 0 {
		return req, nil
	}
	if lim > 0 {
		return lim, nil
	}
	return def, nil
}

func (d *driver) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume capabilities are required")
	}
	if why := checkCapabilities(req.GetVolumeCapabilities()); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	if req.GetVolumeContentSource() != nil {
		return nil, status.Error(codes.InvalidArgument, "snapshots and clones are not offered by this driver")
	}
	block, why := blockAccess(req.GetVolumeCapabilities())
	if why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	size, err := requestedSize(req.GetCapacityRange(), d.defaultSize)
	if err != nil {
		return nil, err
	}
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	id := idForName(req.GetName())
	v, err := d.store.get(id)
	switch {
	case err == nil:
		lim := req.GetCapacityRange().GetLimitBytes()
		if v.Capacity < size || (lim > 0 && v.Capacity > lim) {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with capacity %d", req.GetName(), v.Capacity)
		}
		if v.Block != block {
			return nil, status.Errorf(codes.AlreadyExists, "volume %q exists with another access type", req.GetName())
		}
	case errors.Is(err, errNoVolume):
		v = &volumeRecord{ID: id, Name: req.GetName(), Capacity: size, Block: block}
		if err := d.store.create(v); err != nil {
			return nil, status.Errorf(codes.Internal, "creating volume: %v", err)
		}
	default:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      v.ID,
		CapacityBytes: v.Capacity,
		// The StorageClass parameters come back as the PV's volume attributes.
		VolumeContext:      req.GetParameters(),
		AccessibleTopology: []*csi.Topology{d.topology()},
	}}, nil
}

func (d *driver) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	// Deleting a volume that is gone is a success (idempotent).
	err := d.ifExists(req.GetVolumeId(), func(v *volumeRecord) error {
		if v.AttachedTo != "" {
			return status.Errorf(codes.FailedPrecondition, "volume %s is still attached to %s", v.ID, v.AttachedTo)
		}
		if v.Block {
			// Unstaging detached it; one left by a crash goes now.
			if err := detachLoop(d.store.blockPath(v.ID)); err != nil {
				return status.Errorf(codes.Internal, "detaching volume %s: %v", v.ID, err)
			}
		}
		if err := d.store.remove(v.ID); err != nil {
			return status.Errorf(codes.Internal, "deleting volume %s: %v", v.ID, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (d *driver) ControllerPublishVolume(_ context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	if !d.attachRequired {
		return nil, status.Error(codes.Unimplemented, "attach is not required by this driver")
	}
	if req.GetVolumeId() == "" || req.GetNodeId() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, node_id and volume_capability are required")
	}
	if req.GetNodeId() != d.nodeID {
		return nil, status.Errorf(codes.NotFound, "node %q is not served by this driver", req.GetNodeId())
	}
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	v, err := d.store.get(req.GetVolumeId())
	if errors.Is(err, errNoVolume) {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if why := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	if v.AttachedTo != "" && v.AttachedTo != req.GetNodeId() {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is attached to %s", v.ID, v.AttachedTo)
	}
	v.AttachedTo = req.GetNodeId()
	if err := d.store.put(v); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// What the node side checks on NodeStage: proof the CO passed the attach result on.
	return &csi.ControllerPublishVolumeResponse{PublishContext: map[string]string{"attachedTo": v.AttachedTo}}, nil
}

func (d *driver) ControllerUnpublishVolume(_ context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	if !d.attachRequired {
		return nil, status.Error(codes.Unimplemented, "attach is not required by this driver")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id is required")
	}
	err := d.ifExists(req.GetVolumeId(), func(v *volumeRecord) error {
		if req.GetNodeId() == "" || v.AttachedTo == req.GetNodeId() {
			v.AttachedTo = ""
			if err := d.store.put(v); err != nil {
				return status.Error(codes.Internal, err.Error())
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

func (d *driver) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" || len(req.GetVolumeCapabilities()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_capabilities are required")
	}
	d.store.mu.Lock()
	v, err := d.store.get(req.GetVolumeId())
	d.store.mu.Unlock()
	if errors.Is(err, errNoVolume) {
		return nil, status.Errorf(codes.NotFound, "volume %s not found", req.GetVolumeId())
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if why := checkCapabilities(req.GetVolumeCapabilities()); why != "" {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: why}, nil
	}
	for _, c := range req.GetVolumeCapabilities() {
		if err := checkAccessType(v, c); err != nil {
			return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
		}
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

func (d *driver) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetCapacityRange() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id and capacity_range are required")
	}
	size, err := requestedSize(req.GetCapacityRange(), 0)
	if err != nil {
		return nil, err
	}
	v, err := d.grow(req.GetVolumeId(), size)
	if err != nil {
		return nil, err
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: v.Capacity, NodeExpansionRequired: true}, nil
}

// ifExists runs fn on the volume's record under the store lock; a volume
// that does not exist is no error (fn is not called then).
func (d *driver) ifExists(id string, fn func(v *volumeRecord) error) error {
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	v, err := d.store.get(id)
	if errors.Is(err, errNoVolume) {
		return nil
	}
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	return fn(v)
}

// grow raises the volume's recorded capacity to size (a directory grows by
// bookkeeping: the record's capacity is what stats report).
func (d *driver) grow(id string, size int64) (*volumeRecord, error) {
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	v, err := d.store.get(id)
	if errors.Is(err, errNoVolume) {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", id)
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if size > v.Capacity {
		v.Capacity = size
		if err := d.store.put(v); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return v, nil
}
