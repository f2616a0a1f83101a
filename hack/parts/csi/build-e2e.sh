#!/usr/bin/env bash
# e2e-storage.test: the upstream storage test suites of the pinned
# k8s.io/kubernetes module (test/e2e/storage/testsuites) for a pre-installed
# driver through test/e2e/storage/external (--storage.testdriver=FILE), and
# nothing else, built into the control-plane cache next to e2e.test by a small
# test main generated here. For benches/storage (python -m benches.storage);
# not part of CI (run by hand or through the bench).
#
#   hack/parts/csi/build-e2e.sh        prints the bin dir (not a CI part: hack/test.sh runs hack/parts/*.sh only)
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
OUT="$KUBELET_CACHE/k8s-$K8S_VERSION"
# The control plane, the upstream kubelet, the images' binaries and ginkgo,
# and the module dir (go.mod with the staging replaces) this builds in.
bash "$REPO_ROOT/hack/build-control-plane.sh" kube-apiserver kubectl kubelet \
    kube-controller-manager kube-scheduler agnhost nnp ginkgo e2e.test >/dev/null
SRC="$OUT/src"

MAIN="$(cat <<'GO'
// Package e2estorage runs the storage test suites of k8s.io/kubernetes against
// pre-installed drivers given with --storage.testdriver, and nothing else.
package e2estorage

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
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
	_ "k8s.io/kubernetes/test/e2e/storage/external"
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

func TestStorage(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	klog.EnableContextualLogging(true)
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "storage", suiteConfig, reporterConfig)
}
GO
)"
stamp="$(printf '%s' "$MAIN" | sha256sum | cut -c1-16)"
if [ -x "$OUT/bin/e2e-storage.test" ] && [ "$(cat "$OUT/bin/.e2e-storage.test.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$OUT/bin"
    exit 0
fi
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
exec 9>"$OUT/.build.lock"
flock 9
cd "$SRC"
mkdir -p e2estorage
printf '%s\n' "$MAIN" >e2estorage/storage_test.go
log "building e2e-storage.test (test/e2e/storage/testsuites via storage/external) $K8S_VERSION"
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
CGO_ENABLED=0 GOFLAGS=-mod=mod nice go test -c -trimpath -ldflags "$ldflags" \
    -o "$OUT/bin/e2e-storage.test.tmp" ./e2estorage
mv "$OUT/bin/e2e-storage.test.tmp" "$OUT/bin/e2e-storage.test"
echo "$stamp" >"$OUT/bin/.e2e-storage.test.stamp"
echo "$OUT/bin"
