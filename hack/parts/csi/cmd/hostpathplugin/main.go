// Command hostpathplugin stands in for csi-driver-host-path's binary of that
// name in the one mode the upstream DRA e2e suite uses: --proxy-endpoint.
// The suite's proxy pod runs it (through exec) to pair connections: the
// kubelet dials the unix socket at --endpoint, the e2e process has dialled
// the TCP port at --proxy-endpoint in advance (through port-forward), and
// bytes flow both ways between one of each. No CSI driver is built in.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	endpoint := flag.String("endpoint", "", "the socket clients connect to: a path, unix://PATH or tcp://ADDR")
	proxyEndpoint := flag.String("proxy-endpoint", "", "the socket whose connections serve those clients")
	verbosity := flag.Int("v", 0, "log verbosity (connection events at 3 and above)")
	flag.Parse()
	if *proxyEndpoint == "" || *endpoint == "" {
		fmt.Fprintln(os.Stderr, "hostpathplugin: only the proxy mode is provided here; give --endpoint and --proxy-endpoint")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	defer stop()
	if err := run(ctx, *endpoint, *proxyEndpoint, *verbosity); err != nil {
		log.Fatalf("hostpathplugin: %v", err)
	}
}

// listen opens an endpoint; a unix socket left by an earlier run is replaced
// and removed again on return.
func listen(endpoint string) (net.Listener, func(), error) {
	proto, addr := "unix", endpoint
	if i := strings.Index(endpoint, "://"); i >= 0 {
		proto, addr = strings.ToLower(endpoint[:i]), endpoint[i+3:]
	}
	if addr == "" || (proto != "unix" && proto != "tcp") {
		return nil, nil, fmt.Errorf("invalid endpoint %q", endpoint)
	}
	cleanup := func() {}
	if proto == "unix" {
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, nil, err
		}
		cleanup = func() { _ = os.Remove(addr) }
	}
	l, err := net.Listen(proto, addr)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return l, cleanup, nil
}

func run(ctx context.Context, endpoint, proxyEndpoint string, verbosity int) error {
	clients, cleanClients, err := listen(endpoint)
	if err != nil {
		return fmt.Errorf("listen %s: %w", endpoint, err)
	}
	defer cleanClients()
	servers, cleanServers, err := listen(proxyEndpoint)
	if err != nil {
		clients.Close()
		return fmt.Errorf("listen %s: %w", proxyEndpoint, err)
	}
	defer cleanServers()
	go func() {
		<-ctx.Done()
		clients.Close()
		servers.Close()
	}()
	if verbosity >= 3 {
		log.Printf("proxying %s to %s", endpoint, proxyEndpoint)
	}
	for {
		// A client first; the kernel queues the pre-dialled server side meanwhile.
		c := accept(ctx, clients, endpoint)
		if c == nil {
			return nil
		}
		s := accept(ctx, servers, proxyEndpoint)
		if s == nil {
			c.Close()
			return nil
		}
		if verbosity >= 3 {
			log.Printf("paired a connection on %s", endpoint)
		}
		go pipe(c, s)
		go pipe(s, c)
	}
}

// accept waits for a connection; nil once the context has ended. A failed
// accept (a client that gave up, descriptors short for a moment) is retried.
func accept(ctx context.Context, l net.Listener, endpoint string) net.Conn {
	for {
		c, err := l.Accept()
		if err == nil {
			return c
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Printf("accept on %s: %v", endpoint, err)
	}
}

// pipe copies until EOF, then closes the destination so its peer sees the end too.
func pipe(from, to net.Conn) {
	defer to.Close()
	_, _ = io.Copy(to, from)
}
