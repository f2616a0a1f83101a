#!/usr/bin/env bash
# Build Kubernetes components with Go from the k8s.io/kubernetes module at a
# pinned release, into the cache outside the repo. The module's staging repos
# (k8s.io/api, client-go, ...) are replaced by their matching v0.x releases,
# which is what makes k8s.io/kubernetes buildable as a dependency. Rebuilds
# only what is missing.
#
#   hack/build-control-plane.sh [TARGET...]     (default: kube-apiserver kubectl)
#
# Targets: kube-apiserver kubectl kubelet kube-controller-manager kube-scheduler
#   agnhost    test/images/agnhost, static (the e2e tests' Swiss-army image)
#   nnp        test/images/nonewprivs' binary, static
#   ginkgo     the ginkgo CLI at the version k8s.io/kubernetes pins (runs e2e.test in parallel)
#   e2e.test   a test binary holding only test/e2e/common/{node,storage}: a small
#              test main generated here, not the whole test/e2e (far faster to build).
#              (Not test/e2e/common itself: it imports common/network too.)
#   e2e_node.test  the node e2e suite, test/e2e_node (go test -c of the module's own
#              package: its test-only imports need `go get -t` first)
#   sample-device-plugin  test/images/sample-device-plugin, static (device plugin specs)
set -euo pipefail
source "$(dirname "$0")/lib.sh"

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
OUT="$KUBELET_CACHE/k8s-$K8S_VERSION"
SRC="$OUT/src"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(kube-apiserver kubectl)

mkdir -p "$SRC" "$OUT/bin"
# Two callers at once (a test part and the conformance harness) would rewrite
# go.mod under each other's build.
exec 9>"$OUT/.build.lock"
flock 9

# The node conformance test main: the e2e framework's flags, the two suites,
# and a suite setup reduced to what a one-node cluster without add-ons needs
# (upstream's also waits for kube-system pods and pre-pulls images).
E2E_MAIN="$(cat <<'GO'
// Package e2econformance runs the node conformance suites of k8s.io/kubernetes
// (test/e2e/common/node and test/e2e/common/storage) and nothing else.
package e2econformance

import (
	"context"
	"flag"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"

	_ "k8s.io/component-base/logs/testinit"
	_ "k8s.io/kubernetes/test/e2e/common/node"
	_ "k8s.io/kubernetes/test/e2e/common/storage"
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	framework.AfterReadingAllFlags(&framework.TestContext)
	os.Exit(m.Run())
}

var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client")
	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))
	return nil
}, func(ctx context.Context, _ []byte) {
	framework.TestContext.IPFamily = "ipv4"
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client")
	nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
	framework.ExpectNoError(err)
	framework.TestContext.CloudConfig.NumNodes = len(nodes.Items)
})

func TestConformance(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "node conformance", suiteConfig, reporterConfig)
}
GO
)"
e2e_stamp="$(printf '%s' "$E2E_MAIN" | sha256sum | cut -c1-16)"

missing=()
for t in "${targets[@]}"; do
    if [ "$t" = e2e.test ] && [ "$(cat "$OUT/bin/.e2e.test.stamp" 2>/dev/null)" != "$e2e_stamp" ]; then
        missing+=("$t")
        continue
    fi
    [ -x "$OUT/bin/$t" ] || missing+=("$t")
done
[ ${#missing[@]} -eq 0 ] && { echo "$OUT/bin"; exit 0; }

command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || apt_install golang-go
cd "$SRC"
staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
    cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
    cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
    kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
    mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)
header="$({
    echo "module kubeletpy.local/k8sbuild"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    for m in "${staging[@]}"; do echo "replace k8s.io/$m => k8s.io/$m $STAGING_VERSION"; done
})"
# Start go.mod afresh only when the pins change; otherwise `go mod tidy` below
# only adds what new targets need, and a build already running keeps its graph.
if [ ! -f go.mod ] || [ "$(cat .go.mod.header 2>/dev/null)" != "$header" ]; then
    echo "$header" >go.mod
    echo "$header" >.go.mod.header
fi
# Every command any target needs, so one `go mod tidy` resolves them all.
cat >tools.go <<'GO'
//go:build tools

// Package tools pins the commands this recipe builds.
package tools

import (
	_ "github.com/onsi/ginkgo/v2/ginkgo"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/test/images/agnhost"
	_ "k8s.io/kubernetes/test/images/nonewprivs"
	_ "k8s.io/kubernetes/test/images/sample-device-plugin"
)
GO
mkdir -p e2econformance
printf '%s\n' "$E2E_MAIN" >e2econformance/conformance_test.go
log "resolving k8s.io/kubernetes $K8S_VERSION (staging $STAGING_VERSION)"
# tidy fetches the modules these packages need; `go build -mod=mod` fetches
# anything else it needs (no `go mod download` of the whole module graph).
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
ldflags="$(k8s_ldflags "$K8S_VERSION")"
# -s -w drop the symbol table and DWARF at link time, so the compiler need not
# write DWARF either: about 6 % less compile CPU (client-go, measured cold).
nodwarf="-gcflags=all=-dwarf=false"
# Every command in one `go build`: one package load for all of them, and their
# links run beside the compiles instead of one after another.
pkgs=()
names=()
for t in "${missing[@]}"; do
    case "$t" in
        # The test binaries after the commands: they reuse every package those compiled.
        e2e.test | e2e_node.test) continue ;;
        ginkgo) pkg=github.com/onsi/ginkgo/v2/ginkgo ;;
        agnhost)
            pkg=k8s.io/kubernetes/test/images/agnhost
            agnhost_version="$(cat "$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' k8s.io/kubernetes)/test/images/agnhost/VERSION")"
            # Only agnhost's main package has a Version variable; -X leaves the others alone.
            ldflags="$ldflags -X main.Version=$agnhost_version" ;;
        nnp) pkg=k8s.io/kubernetes/test/images/nonewprivs ;;
        sample-device-plugin) pkg=k8s.io/kubernetes/test/images/sample-device-plugin ;;
        *) pkg="k8s.io/kubernetes/cmd/$t" ;;
    esac
    pkgs+=("$pkg")
    names+=("$t")
done
if [ ${#pkgs[@]} -gt 0 ]; then
    log "building ${names[*]} $K8S_VERSION (one go build)"
    staging="$OUT/bin/.staging"
    rm -rf "$staging"
    mkdir -p "$staging"
    CGO_ENABLED=0 GOFLAGS=-mod=mod nice go build -trimpath "$nodwarf" -ldflags "$ldflags" -o "$staging/" "${pkgs[@]}"
    for i in "${!pkgs[@]}"; do
        mv "$staging/$(basename "${pkgs[$i]}")" "$OUT/bin/${names[$i]}"
    done
    rmdir "$staging"
fi
# The e2e binary last: it reuses every package the commands compiled.
if [[ " ${missing[*]} " == *" e2e.test "* ]]; then
    log "building e2e.test $K8S_VERSION"
    CGO_ENABLED=0 GOFLAGS=-mod=mod nice go test -c -trimpath "$nodwarf" -ldflags "$ldflags" \
        -o "$OUT/bin/e2e.test.tmp" ./e2econformance
    mv "$OUT/bin/e2e.test.tmp" "$OUT/bin/e2e.test"
    echo "$e2e_stamp" >"$OUT/bin/.e2e.test.stamp"
fi
if [[ " ${missing[*]} " == *" e2e_node.test "* ]]; then
    log "building e2e_node.test $K8S_VERSION"
    # The package's tests import modules (k8s.io/system-validators) whose
    # go.sum lines tidy keeps only for packages of this module.
    GOFLAGS=-mod=mod go get -t "k8s.io/kubernetes/test/e2e_node@$K8S_VERSION"
    # CGO_ENABLED=0 as every other target, so their compiled packages are
    # shared (one serial spec needs cgo; the harness reports it).
    CGO_ENABLED=0 GOFLAGS=-mod=mod nice go test -c -trimpath "$nodwarf" -ldflags "$ldflags" \
        -o "$OUT/bin/e2e_node.test.tmp" k8s.io/kubernetes/test/e2e_node
    mv "$OUT/bin/e2e_node.test.tmp" "$OUT/bin/e2e_node.test"
fi
echo "$OUT/bin"
