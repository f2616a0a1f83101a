// Command csi-registrar registers a CSI driver with the kubelet through the
// kubelet's plugin registration API (k8s.io/kubelet pluginregistration/v1),
// as node-driver-registrar does: it asks the driver its name over the CSI
// socket, serves Registration on <registration dir>/<driver>-reg.sock, and
// tells the kubelet where the driver's socket is on the host. A registration
// the kubelet rejects ends the process with an error, so the pod restarts and
// tries again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type registrar struct {
	registerapi.UnimplementedRegistrationServer
	name     string
	endpoint string
	versions []string
	failed   chan string
}

func (r *registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	log.Printf("kubelet asked for plugin info")
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: r.versions,
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if !s.PluginRegistered {
		log.Printf("registration failed: %s", s.Error)
		select {
		case r.failed <- s.Error:
		default:
		}
	} else {
		log.Printf("registered with the kubelet")
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

// driverName asks the driver for its name, waiting for its socket.
func driverName(ctx context.Context, address string) (string, error) {
	conn, err := grpc.NewClient("unix://"+address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	id := csi.NewIdentityClient(conn)
	for {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := id.GetPluginInfo(callCtx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			if resp.GetName() == "" {
				return "", errors.New("the driver returned an empty name")
			}
			return resp.GetName(), nil
		}
		log.Printf("waiting for the driver at %s: %v", address, err)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func main() {
	csiAddress := flag.String("csi-address", "/csi/csi.sock", "the driver's socket, as this process sees it")
	kubeletPath := flag.String("kubelet-registration-path", "", "the driver's socket, as the kubelet sees it on the host")
	regDir := flag.String("plugin-registration-path", "/registration", "the kubelet's plugin registration dir")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long to wait for the driver")
	flag.Parse()
	if *kubeletPath == "" {
		log.Fatal("--kubelet-registration-path is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	name, err := driverName(ctx, strings.TrimPrefix(*csiAddress, "unix://"))
	cancel()
	if err != nil {
		log.Fatalf("driver name: %v", err)
	}
	sock := filepath.Join(*regDir, fmt.Sprintf("%s-reg.sock", name))
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		log.Fatalf("removing stale socket %s: %v", sock, err)
	}
	lis, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatalf("listen on %s: %v", sock, err)
	}
	r := &registrar{name: name, endpoint: *kubeletPath, versions: []string{"1.0.0"}, failed: make(chan string, 1)}
	srv := grpc.NewServer()
	registerapi.RegisterRegistrationServer(srv, r)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	exit := 0
	go func() {
		select {
		case <-sig:
		case msg := <-r.failed:
			log.Printf("exiting: the kubelet rejected the driver: %s", msg)
			exit = 1
		}
		srv.Stop()
	}()
	log.Printf("registering %s (socket %s) through %s", name, *kubeletPath, sock)
	if err := srv.Serve(lis); err != nil {
		log.Printf("serve: %v", err)
		exit = 1
	}
	_ = os.Remove(sock)
	os.Exit(exit)
}
