package main

import (
	"context"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
)

const testDriver = "hostpath.test"

// fakeController answers ControllerExpandVolume as told and records the requests.
type fakeController struct {
	csi.ControllerClient
	nodeStep bool
	err      error
	calls    []*csi.ControllerExpandVolumeRequest
}

func (f *fakeController) ControllerExpandVolume(_ context.Context, req *csi.ControllerExpandVolumeRequest, _ ...grpc.CallOption) (*csi.ControllerExpandVolumeResponse, error) {
	f.calls = append(f.calls, req)
	if f.err != nil {
		return nil, f.err
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: req.GetCapacityRange().GetRequiredBytes(), NodeExpansionRequired: f.nodeStep}, nil
}

func objects(driver string) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	block := v1.PersistentVolumeBlock
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1"},
		Spec: v1.PersistentVolumeSpec{
			Capacity:    v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOncePod},
			VolumeMode:  &block,
			PersistentVolumeSource: v1.PersistentVolumeSource{
				CSI: &v1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "vol-1"},
			},
		},
	}
	pvc := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "ns"},
		Spec: v1.PersistentVolumeClaimSpec{
			VolumeName: "pv-1",
			Resources: v1.VolumeResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")},
			},
		},
		Status: v1.PersistentVolumeClaimStatus{
			Phase:    v1.ClaimBound,
			Capacity: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")},
			Conditions: []v1.PersistentVolumeClaimCondition{
				{Type: "SomethingElse", Status: v1.ConditionTrue},
			},
		},
	}
	return pvc, pv
}

// syncOnce runs one sync of a claim whose PV belongs to driver, against a fake API server.
func syncOnce(t *testing.T, ctl *fakeController, driver string) (*fake.Clientset, error) {
	t.Helper()
	pvc, pv := objects(driver)
	return syncObjects(t, ctl, pvc, pv)
}

func syncObjects(t *testing.T, ctl *fakeController, pvc *v1.PersistentVolumeClaim, pv *v1.PersistentVolume) (*fake.Clientset, error) {
	t.Helper()
	cs := fake.NewSimpleClientset(pvc, pv)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := indexer.Add(pvc); err != nil {
		t.Fatal(err)
	}
	r := &resizer{
		cs: cs, claims: corelisters.NewPersistentVolumeClaimLister(indexer), csi: ctl,
		driver: testDriver, expands: true, timeout: time.Second, recorder: record.NewFakeRecorder(10),
	}
	return cs, r.sync(context.Background(), "ns/claim")
}

func get(t *testing.T, cs *fake.Clientset) (*v1.PersistentVolumeClaim, *v1.PersistentVolume) {
	t.Helper()
	ctx := context.Background()
	pvc, err := cs.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "claim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, "pv-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pvc, pv
}

func conditionTypes(pvc *v1.PersistentVolumeClaim) []v1.PersistentVolumeClaimConditionType {
	var out []v1.PersistentVolumeClaimConditionType
	for _, c := range pvc.Status.Conditions {
		out = append(out, c.Type)
	}
	return out
}

func TestExpansionLeavesTheNodeStepPending(t *testing.T) {
	ctl := &fakeController{nodeStep: true}
	cs, err := syncOnce(t, ctl, testDriver)
	if err != nil {
		t.Fatal(err)
	}
	pvc, pv := get(t, cs)
	if len(ctl.calls) != 1 || ctl.calls[0].GetVolumeId() != "vol-1" || ctl.calls[0].GetCapacityRange().GetRequiredBytes() != 2<<30 {
		t.Fatalf("ControllerExpandVolume calls: %v", ctl.calls)
	}
	c := ctl.calls[0].GetVolumeCapability()
	if c.GetBlock() == nil || c.GetAccessMode().GetMode() != csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER {
		t.Fatalf("capability %v", c)
	}
	if got := pv.Spec.Capacity[v1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Fatalf("PV capacity %s", got.String())
	}
	if got := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]; got != v1.PersistentVolumeClaimNodeResizePending {
		t.Fatalf("resize status %q", got)
	}
	if got := pvc.Status.AllocatedResources[v1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Fatalf("allocated %s", got.String())
	}
	if got := pvc.Status.Capacity[v1.ResourceStorage]; got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Fatalf("capacity changed before the node step: %s", got.String())
	}
	want := []v1.PersistentVolumeClaimConditionType{"SomethingElse", v1.PersistentVolumeClaimFileSystemResizePending}
	if got := conditionTypes(pvc); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("conditions %v, want %v", got, want)
	}
}

func TestExpansionWithoutNodeStepFinishesTheClaim(t *testing.T) {
	cs, err := syncOnce(t, &fakeController{}, testDriver)
	if err != nil {
		t.Fatal(err)
	}
	pvc, _ := get(t, cs)
	if got := pvc.Status.Capacity[v1.ResourceStorage]; got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Fatalf("capacity %s", got.String())
	}
	if len(pvc.Status.AllocatedResourceStatuses) != 0 {
		t.Fatalf("resize status left: %v", pvc.Status.AllocatedResourceStatuses)
	}
	if got := conditionTypes(pvc); len(got) != 1 || got[0] != "SomethingElse" {
		t.Fatalf("conditions %v", got)
	}
}

func TestRefusedSizeIsInfeasibleAndRetried(t *testing.T) {
	ctl := &fakeController{err: status.Error(codes.OutOfRange, "too big")}
	cs, err := syncOnce(t, ctl, testDriver)
	if status.Code(err) != codes.OutOfRange {
		t.Fatalf("sync error %v: the claim must be retried", err)
	}
	pvc, pv := get(t, cs)
	if got := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]; got != v1.PersistentVolumeClaimControllerResizeInfeasible {
		t.Fatalf("resize status %q", got)
	}
	if got := conditionTypes(pvc); len(got) != 2 || got[1] != v1.PersistentVolumeClaimControllerResizeError {
		t.Fatalf("conditions %v", got)
	}
	if got := pv.Spec.Capacity[v1.ResourceStorage]; got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Fatalf("PV grew on a failure: %s", got.String())
	}
}

func TestTransientFailureStaysInProgress(t *testing.T) {
	ctl := &fakeController{err: status.Error(codes.Unavailable, "busy")}
	cs, _ := syncOnce(t, ctl, testDriver)
	pvc, _ := get(t, cs)
	if got := pvc.Status.AllocatedResourceStatuses[v1.ResourceStorage]; got != v1.PersistentVolumeClaimControllerResizeInProgress {
		t.Fatalf("resize status %q", got)
	}
}

func TestOtherDriversAndGrownVolumesAreLeftAlone(t *testing.T) {
	ctl := &fakeController{}
	if _, err := syncOnce(t, ctl, "other.driver"); err != nil {
		t.Fatal(err)
	}
	pvc, pv := objects(testDriver)
	pv.Spec.Capacity[v1.ResourceStorage] = resource.MustParse("2Gi")
	if _, err := syncObjects(t, ctl, pvc, pv); err != nil {
		t.Fatal(err)
	}
	if len(ctl.calls) != 0 {
		t.Fatalf("expanded: %v", ctl.calls)
	}
}
