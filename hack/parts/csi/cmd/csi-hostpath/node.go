package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	ephemeralKey = "csi.storage.k8s.io/ephemeral"
	// StorageClass parameters (they become the PV's volume attributes) that
	// make the node side insist on a secret, so tests can prove the CO fetched
	// and passed the one named in the StorageClass.
	requireStageSecret   = "requireNodeStageSecret"
	requirePublishSecret = "requireNodePublishSecret"
	usageScanLimit       = 1_000_000
)

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	var out []*csi.NodeServiceCapability
	for _, t := range []csi.NodeServiceCapability_RPC_Type{
		csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
		csi.NodeServiceCapability_RPC_EXPAND_VOLUME,
		csi.NodeServiceCapability_RPC_VOLUME_CONDITION,
		csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	} {
		out = append(out, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.NodeGetCapabilitiesResponse{Capabilities: out}, nil
}

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{
		NodeId:             d.nodeID,
		MaxVolumesPerNode:  d.maxVolumes,
		AccessibleTopology: d.topology(),
	}, nil
}

func requireSecret(volCtx, secrets map[string]string, param string) error {
	if key := volCtx[param]; key != "" && secrets[key] == "" {
		return status.Errorf(codes.FailedPrecondition, "secret key %q was not passed (the volume's %s)", key, param)
	}
	return nil
}

// lookup returns the volume's record under the store lock, mapped to CSI codes.
func (d *driver) lookup(id string) (*volumeRecord, error) {
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	v, err := d.store.get(id)
	if errors.Is(err, errNoVolume) {
		return nil, status.Errorf(codes.NotFound, "volume %q not found", id)
	}
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return v, nil
}

func (d *driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, staging_target_path and volume_capability are required")
	}
	if why := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	v, err := d.lookup(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if d.attachRequired && req.GetPublishContext()["attachedTo"] != d.nodeID {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %s is not attached to %s (publish context %v)", v.ID, d.nodeID, req.GetPublishContext())
	}
	if err := requireSecret(req.GetVolumeContext(), req.GetSecrets(), requireStageSecret); err != nil {
		return nil, err
	}
	if err := checkAccessType(v, req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if v.Block {
		// Staged: attached to a loop device, which NodePublish bind-mounts.
		if _, err := attachLoop(d.store.blockPath(v.ID)); err != nil {
			return nil, status.Errorf(codes.Internal, "attaching volume %s: %v", v.ID, err)
		}
		return &csi.NodeStageVolumeResponse{}, nil
	}
	target := req.GetStagingTargetPath()
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Errorf(codes.Internal, "staging path: %v", err)
	}
	if mounted, err := isMountPoint(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	} else if mounted {
		return &csi.NodeStageVolumeResponse{}, nil
	}
	flags := req.GetVolumeCapability().GetMount().GetMountFlags()
	if err := bindMount(d.store.dataDir(v.ID), target, false, flags); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and staging_target_path are required")
	}
	if err := unmountIfMounted(req.GetStagingTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.store.mu.Lock()
	v, err := d.store.get(req.GetVolumeId())
	d.store.mu.Unlock()
	if err == nil && v.Block {
		if err := detachLoop(d.store.blockPath(v.ID)); err != nil {
			return nil, status.Errorf(codes.Internal, "detaching volume %s: %v", v.ID, err)
		}
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// publishSource is what NodePublish bind-mounts for the request.
func (d *driver) publishSource(req *csi.NodePublishVolumeRequest) (string, error) {
	id := req.GetVolumeId()
	if req.GetVolumeContext()[ephemeralKey] == "true" {
		if !validID(id) {
			return "", status.Errorf(codes.InvalidArgument, "invalid ephemeral volume id %q", id)
		}
		size, _ := strconv.ParseInt(req.GetVolumeContext()["size"], 10, 64)
		if size <= 0 {
			size = d.defaultSize
		}
		d.store.mu.Lock()
		defer d.store.mu.Unlock()
		if _, err := d.store.get(id); errors.Is(err, errNoVolume) {
			if err := d.store.create(&volumeRecord{ID: id, Name: id, Capacity: size, Ephemeral: true}); err != nil {
				return "", status.Errorf(codes.Internal, "creating ephemeral volume: %v", err)
			}
		} else if err != nil {
			return "", status.Error(codes.Internal, err.Error())
		}
		return d.store.dataDir(id), nil
	}
	v, err := d.lookup(id)
	if err != nil {
		return "", err
	}
	if err := checkAccessType(v, req.GetVolumeCapability()); err != nil {
		return "", err
	}
	if v.Block {
		dev, err := findLoop(d.store.blockPath(v.ID))
		if err != nil {
			return "", status.Error(codes.Internal, err.Error())
		}
		if dev == "" {
			return "", status.Errorf(codes.FailedPrecondition, "volume %s is not staged (no loop device)", id)
		}
		return dev, nil
	}
	if staging := req.GetStagingTargetPath(); staging != "" {
		mounted, err := isMountPoint(staging)
		if err != nil {
			return "", status.Error(codes.Internal, err.Error())
		}
		if !mounted {
			return "", status.Errorf(codes.FailedPrecondition, "volume %s is not staged at %s", id, staging)
		}
		return staging, nil
	}
	return "", status.Errorf(codes.FailedPrecondition, "volume %s: staging_target_path is required (STAGE_UNSTAGE_VOLUME)", v.ID)
}

func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" || req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "volume_id, target_path and volume_capability are required")
	}
	if why := checkCapabilities([]*csi.VolumeCapability{req.GetVolumeCapability()}); why != "" {
		return nil, status.Error(codes.InvalidArgument, why)
	}
	if err := requireSecret(req.GetVolumeContext(), req.GetSecrets(), requirePublishSecret); err != nil {
		return nil, err
	}
	source, err := d.publishSource(req)
	if err != nil {
		return nil, err
	}
	target := req.GetTargetPath()
	if err := d.claimTarget(req.GetVolumeId(), target, req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if err := makeTarget(target, isBlockDevice(source)); err != nil {
		return nil, status.Errorf(codes.Internal, "target path: %v", err)
	}
	if mounted, err := isMountPoint(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	} else if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	flags := req.GetVolumeCapability().GetMount().GetMountFlags()
	if err := bindMount(source, target, req.GetReadonly(), flags); err != nil {
		d.store.mu.Lock()
		if v, gerr := d.store.get(req.GetVolumeId()); gerr == nil {
			_ = d.releaseTarget(v, target)
		}
		d.store.mu.Unlock()
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// makeTarget makes the publish target: a directory, or for a block volume a
// file the device is bind-mounted on (its parent is the CO's, as the spec says).
func makeTarget(target string, block bool) error {
	if !block {
		return os.MkdirAll(target, 0o750)
	}
	f, err := os.OpenFile(target, os.O_RDONLY|os.O_CREATE|unix.O_NOFOLLOW, 0o640)
	if err != nil {
		return err
	}
	return f.Close()
}

// claimTarget records a publish target; a SINGLE_NODE_SINGLE_WRITER volume
// may have one only (FAILED_PRECONDITION otherwise, as the spec asks).
func (d *driver) claimTarget(id, target string, c *csi.VolumeCapability) error {
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	v, err := d.store.get(id)
	if err != nil {
		return nil // ephemeral volumes are made by publishSource; others were checked
	}
	single := c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
	for _, t := range v.Targets {
		if t == target {
			return nil
		}
	}
	if len(v.Targets) > 0 && (single || v.SingleWriter) {
		return status.Errorf(codes.FailedPrecondition, "volume %s is published at %s for a single writer", id, v.Targets[0])
	}
	v.Targets = append(v.Targets, target)
	v.SingleWriter = v.SingleWriter || single
	return d.store.put(v)
}

// releaseTarget forgets a publish target. Callers hold the store lock.
func (d *driver) releaseTarget(v *volumeRecord, target string) error {
	kept := v.Targets[:0]
	for _, t := range v.Targets {
		if t != target {
			kept = append(kept, t)
		}
	}
	v.Targets = kept
	if len(kept) == 0 {
		v.SingleWriter = false
	}
	return d.store.put(v)
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and target_path are required")
	}
	target := req.GetTargetPath()
	if err := unmountIfMounted(target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	// The target is the directory (or, for a block volume, the file) NodePublish
	// made: remove only it, never its content.
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Errorf(codes.Internal, "removing %s: %v", target, err)
	}
	d.store.mu.Lock()
	defer d.store.mu.Unlock()
	v, err := d.store.get(req.GetVolumeId())
	if err != nil {
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if v.Ephemeral {
		if err := d.store.remove(v.ID); err != nil {
			return nil, status.Errorf(codes.Internal, "removing ephemeral volume %s: %v", v.ID, err)
		}
		return &csi.NodeUnpublishVolumeResponse{}, nil
	}
	if err := d.releaseTarget(v, target); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	v, err := d.lookup(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(req.GetVolumePath()); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume path %s: %v", req.GetVolumePath(), err)
	}
	if v.Block {
		// A raw device has a size, not a filesystem's usage.
		return &csi.NodeGetVolumeStatsResponse{
			Usage:           []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: v.Capacity}},
			VolumeCondition: &csi.VolumeCondition{Message: "volume is healthy"},
		}, nil
	}
	cond := &csi.VolumeCondition{Message: "volume is healthy"}
	dir := d.store.dataDir(v.ID)
	used, inodesUsed, err := usage(dir, usageScanLimit)
	if err != nil {
		cond = &csi.VolumeCondition{Abnormal: true, Message: "the volume's data directory is gone: " + err.Error()}
	} else if mounted, _ := isMountPoint(req.GetVolumePath()); !mounted {
		cond = &csi.VolumeCondition{Abnormal: true, Message: "the volume is not mounted at " + req.GetVolumePath()}
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(dir), &fs); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	total := v.Capacity
	avail := total - used
	if avail < 0 {
		avail = 0
	}
	return &csi.NodeGetVolumeStatsResponse{
		Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: total, Used: used, Available: avail},
			{Unit: csi.VolumeUsage_INODES, Total: int64(fs.Files), Used: inodesUsed, Available: int64(fs.Ffree)},
		},
		VolumeCondition: cond,
	}, nil
}

func (d *driver) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetVolumePath() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume_id and volume_path are required")
	}
	size, err := requestedSize(req.GetCapacityRange(), 0)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(req.GetVolumePath()); err != nil {
		return nil, status.Errorf(codes.NotFound, "volume path %s: %v", req.GetVolumePath(), err)
	}
	v, err := d.grow(req.GetVolumeId(), size)
	if err != nil {
		return nil, err
	}
	if v.Block {
		if err := d.growDevice(v, req); err != nil {
			return nil, err
		}
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: v.Capacity}, nil
}

// growDevice makes a block volume's device as large as its record: the
// backing file grows, then its loop device (when staged) is told so. The
// request must name the published device, as a CO expanding a raw block
// volume passes it.
func (d *driver) growDevice(v *volumeRecord, req *csi.NodeExpandVolumeRequest) error {
	// The capability is optional in the spec; given, it must be block access.
	if c := req.GetVolumeCapability(); c != nil && c.GetBlock() == nil {
		return status.Error(codes.InvalidArgument, "a block volume is expanded with block access")
	}
	if !isBlockDevice(req.GetVolumePath()) {
		return status.Errorf(codes.InvalidArgument, "volume path %s is not a block device", req.GetVolumePath())
	}
	file := d.store.blockPath(v.ID)
	if err := createBlockFile(file, v.Capacity); err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	dev, err := findLoop(file)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	if dev == "" {
		return nil // not attached: the next attach has the new size
	}
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return status.Error(codes.Internal, err.Error())
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_SET_CAPACITY, 0); err != nil {
		return status.Errorf(codes.Internal, "LOOP_SET_CAPACITY %s: %v", dev, err)
	}
	return nil
}
