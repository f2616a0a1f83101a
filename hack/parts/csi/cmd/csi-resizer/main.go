// Command csi-resizer is kubelet-py's test stand-in for kubernetes-csi's
// external-resizer, which the Go module proxy here does not serve. It does the
// controller half of a claim's expansion for one CSI driver, with the status
// fields of v1.34 (RecoverVolumeExpansionFailure is GA there): a bound claim
// whose request exceeds its PV's capacity is marked ControllerResizeInProgress
// with the Resizing condition, ControllerExpandVolume is called, the PV gets the
// new capacity, and the claim is left NodeResizePending with the
// FileSystemResizePending condition for the kubelet to finish (or, when the
// driver needs no node step, given its new capacity). A failure is the
// ControllerResizeError condition, retried with backoff; a size the driver
// refuses outright is ControllerResizeInfeasible. It runs beside the driver
// as the real sidecar does.
package main

import (
	"context"
	"flag"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
)

func main() {
	address := flag.String("csi-address", "/csi/csi.sock", "the driver's CSI socket")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server (empty: in-cluster)")
	timeout := flag.Duration("timeout", 30*time.Second, "deadline of each CSI call")
	resync := flag.Duration("resync", 10*time.Minute, "how often every claim is looked at again")
	flag.Int("v", 0, "accepted for the sidecars' common flags; logging is not levelled")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("kubeconfig: %v", err)
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		log.Fatalf("client: %v", err)
	}
	conn, err := grpc.NewClient("unix://"+*address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatalf("csi socket %s: %v", *address, err)
	}
	defer conn.Close()
	name, expands := probeDriver(ctx, conn, *timeout)
	log.Printf("resizing claims of driver %s (ControllerExpandVolume: %v)", name, expands)

	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	factory := informers.NewSharedInformerFactory(cs, *resync)
	claims := factory.Core().V1().PersistentVolumeClaims()
	r := &resizer{
		cs:       cs,
		claims:   claims.Lister(),
		csi:      csi.NewControllerClient(conn),
		driver:   name,
		expands:  expands,
		timeout:  *timeout,
		recorder: broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "external-resizer " + name}),
	}
	run(ctx, r, factory, claims.Informer())
}

// probeDriver waits for the driver to answer (it may start after this
// sidecar) and asks whether it expands on the controller side; a driver
// without EXPAND_VOLUME gets only the PV update and the node step, as the
// real sidecar's trivial resizer gives it.
func probeDriver(ctx context.Context, conn *grpc.ClientConn, timeout time.Duration) (string, bool) {
	var name string
	var expands bool
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		call, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(call, &csi.GetPluginInfoRequest{})
		if err != nil {
			log.Printf("waiting for the driver: %v", err)
			return false, nil
		}
		caps, err := csi.NewControllerClient(conn).ControllerGetCapabilities(call, &csi.ControllerGetCapabilitiesRequest{})
		if err != nil {
			log.Printf("ControllerGetCapabilities: %v", err)
			return false, nil
		}
		name = info.GetName()
		for _, c := range caps.GetCapabilities() {
			if c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_EXPAND_VOLUME {
				expands = true
			}
		}
		return true, nil
	})
	if err != nil {
		log.Fatalf("driver never answered: %v", err)
	}
	return name, expands
}

// run feeds every claim change to one worker; a failed sync is retried
// with the controller rate limiter's backoff.
func run(ctx context.Context, r *resizer, factory informers.SharedInformerFactory, claims cache.SharedIndexInformer) {
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer queue.ShutDown()
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	_, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	if err != nil {
		log.Fatalf("claim informer: %v", err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), claims.HasSynced) {
		log.Fatal("claim cache never synced")
	}
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		key, quit := queue.Get()
		if quit {
			return
		}
		if err := r.sync(ctx, key); err != nil {
			log.Printf("claim %s: %v", key, err)
			queue.AddRateLimited(key)
		} else {
			queue.Forget(key)
		}
		queue.Done(key)
	}
}

