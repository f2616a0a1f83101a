package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

type resizer struct {
	cs       kubernetes.Interface
	claims   corelisters.PersistentVolumeClaimLister
	csi      csi.ControllerClient
	driver   string
	expands  bool // the driver offers ControllerExpandVolume
	timeout  time.Duration
	recorder record.EventRecorder
}

// The claim conditions an expansion sets; each new phase replaces them all.
var resizeConditions = map[v1.PersistentVolumeClaimConditionType]bool{
	v1.PersistentVolumeClaimResizing:                true,
	v1.PersistentVolumeClaimFileSystemResizePending: true,
	v1.PersistentVolumeClaimControllerResizeError:   true,
	v1.PersistentVolumeClaimNodeResizeError:         true,
}

// sync expands one claim's volume when its request exceeds the PV's capacity.
// The PV is read from the API server, not a cache: a stale capacity would
// expand again and undo the NodeResizePending the kubelet acts on.
func (r *resizer) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pvc, err := r.claims.PersistentVolumeClaims(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "" {
		return nil
	}
	pv, err := r.cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != r.driver {
		return nil
	}
	want := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	have := pv.Spec.Capacity[v1.ResourceStorage]
	if want.Cmp(have) <= 0 {
		return nil
	}
	return r.expand(ctx, pvc.DeepCopy(), pv.DeepCopy(), want)
}

func (r *resizer) expand(ctx context.Context, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, want resource.Quantity) error {
	pvc, err := r.setStatus(ctx, pvc, func(st *v1.PersistentVolumeClaimStatus) {
		allocated := st.AllocatedResources[v1.ResourceStorage]
		if want.Cmp(allocated) > 0 {
			setAllocated(st, want)
		}
		setResizeStatus(st, v1.PersistentVolumeClaimControllerResizeInProgress)
		setCondition(st, v1.PersistentVolumeClaimResizing, "")
	})
	if err != nil {
		return err
	}
	r.recorder.Eventf(pvc, v1.EventTypeNormal, "Resizing", "External resizer is resizing volume %s", pv.Name)
	size, nodeStep, err := r.controllerExpand(ctx, pv, want)
	if err != nil {
		return r.failed(ctx, pvc, pv, err)
	}
	pv.Spec.Capacity[v1.ResourceStorage] = size
	if _, err := r.cs.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("PV %s capacity: %w", pv.Name, err)
	}
	if nodeStep {
		_, err = r.setStatus(ctx, pvc, func(st *v1.PersistentVolumeClaimStatus) {
			setResizeStatus(st, v1.PersistentVolumeClaimNodeResizePending)
			setCondition(st, v1.PersistentVolumeClaimFileSystemResizePending,
				"Waiting for user to (re-)start a pod to finish file system resize of volume on node.")
		})
		if err == nil {
			r.recorder.Event(pvc, v1.EventTypeNormal, "FileSystemResizeRequired", "Require file system resize of volume on node")
		}
		return err
	}
	_, err = r.setStatus(ctx, pvc, func(st *v1.PersistentVolumeClaimStatus) {
		st.Capacity = v1.ResourceList{v1.ResourceStorage: size}
		delete(st.AllocatedResourceStatuses, v1.ResourceStorage)
		setCondition(st, "", "")
	})
	if err == nil {
		r.recorder.Event(pvc, v1.EventTypeNormal, "VolumeResizeSuccessful", "Resize volume succeeded")
	}
	return err
}

// controllerExpand returns the volume's new capacity and whether the node
// must still expand it.
func (r *resizer) controllerExpand(ctx context.Context, pv *v1.PersistentVolume, want resource.Quantity) (resource.Quantity, bool, error) {
	if !r.expands {
		return want, true, nil
	}
	secrets, err := r.secrets(ctx, pv.Spec.CSI.ControllerExpandSecretRef)
	if err != nil {
		return want, false, err
	}
	call, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.csi.ControllerExpandVolume(call, &csi.ControllerExpandVolumeRequest{
		VolumeId:         pv.Spec.CSI.VolumeHandle,
		CapacityRange:    &csi.CapacityRange{RequiredBytes: want.Value()},
		Secrets:          secrets,
		VolumeCapability: capability(pv),
	})
	if err != nil {
		return want, false, err
	}
	size := want
	if got := resp.GetCapacityBytes(); got > want.Value() {
		size = *resource.NewQuantity(got, resource.BinarySI)
	}
	return size, resp.GetNodeExpansionRequired(), nil
}

// failed records a controller failure on the claim; a size the driver can
// never give is infeasible (the user may then lower the request), anything
// else stays in progress and is retried.
func (r *resizer) failed(ctx context.Context, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume, cause error) error {
	msg := fmt.Sprintf("resize volume %q by resizer %q failed: %v", pv.Name, r.driver, cause)
	r.recorder.Event(pvc, v1.EventTypeWarning, "VolumeResizeFailed", msg)
	_, err := r.setStatus(ctx, pvc, func(st *v1.PersistentVolumeClaimStatus) {
		if infeasible(cause) {
			setResizeStatus(st, v1.PersistentVolumeClaimControllerResizeInfeasible)
		}
		setCondition(st, v1.PersistentVolumeClaimControllerResizeError, msg)
	})
	if err != nil {
		log.Printf("claim %s/%s status after a failed resize: %v", pvc.Namespace, pvc.Name, err)
	}
	return cause
}

func infeasible(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OutOfRange, codes.NotFound:
		return true
	}
	return false
}

func (r *resizer) secrets(ctx context.Context, ref *v1.SecretReference) (map[string]string, error) {
	if ref == nil {
		return nil, nil
	}
	s, err := r.cs.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("controller-expand secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// setStatus applies change to the claim's status and writes it.
func (r *resizer) setStatus(ctx context.Context, pvc *v1.PersistentVolumeClaim, change func(*v1.PersistentVolumeClaimStatus)) (*v1.PersistentVolumeClaim, error) {
	next := pvc.DeepCopy()
	change(&next.Status)
	updated, err := r.cs.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		return pvc, fmt.Errorf("claim status: %w", err)
	}
	return updated, nil
}

func setAllocated(st *v1.PersistentVolumeClaimStatus, size resource.Quantity) {
	if st.AllocatedResources == nil {
		st.AllocatedResources = v1.ResourceList{}
	}
	st.AllocatedResources[v1.ResourceStorage] = size
}

func setResizeStatus(st *v1.PersistentVolumeClaimStatus, s v1.ClaimResourceStatus) {
	if st.AllocatedResourceStatuses == nil {
		st.AllocatedResourceStatuses = map[v1.ResourceName]v1.ClaimResourceStatus{}
	}
	st.AllocatedResourceStatuses[v1.ResourceStorage] = s
}

// setCondition replaces the claim's resize conditions with one of type t
// (none when t is empty); other conditions are kept.
func setCondition(st *v1.PersistentVolumeClaimStatus, t v1.PersistentVolumeClaimConditionType, msg string) {
	kept := st.Conditions[:0:0]
	for _, c := range st.Conditions {
		if !resizeConditions[c.Type] {
			kept = append(kept, c)
		}
	}
	if t != "" {
		now := metav1.Now()
		kept = append(kept, v1.PersistentVolumeClaimCondition{
			Type: t, Status: v1.ConditionTrue, LastTransitionTime: now, LastProbeTime: now, Message: msg,
		})
	}
	st.Conditions = kept
}

// capability describes the PV as ControllerExpandVolume wants it.
func capability(pv *v1.PersistentVolume) *csi.VolumeCapability {
	mode := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	if len(pv.Spec.AccessModes) > 0 {
		switch pv.Spec.AccessModes[0] {
		case v1.ReadOnlyMany:
			mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		case v1.ReadWriteMany:
			mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		case v1.ReadWriteOncePod:
			mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
	}
	c := &csi.VolumeCapability{AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == v1.PersistentVolumeBlock {
		c.AccessType = &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: pv.Spec.CSI.FSType}}
	}
	return c
}
