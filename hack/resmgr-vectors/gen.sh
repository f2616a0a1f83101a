#!/usr/bin/env bash
# Regenerate tests/fixtures/resmgr/*.json from the upstream Go code of the pinned
# k8s.io/kubernetes module: the *_vectors_test.go files here are copied into a
# private symlinked copy of the module (the module cache is read-only) and run.
# Needs Go and the module in the module cache (hack/build-control-plane.sh, or
# `go mod download k8s.io/kubernetes@v1.34.4`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="${K8S_VERSION:-v1.34.4}"
out="$repo/tests/fixtures/resmgr"
work="${RESMGR_VECTORS_WORK:-/tmp/resmgr-vectors-$(id -u)}"
modcache="$(go env GOMODCACHE)"
src="$modcache/k8s.io/kubernetes@$version"
gomod="${K8S_BUILD_GOMOD:-$HOME/.cache/kubelet-py/k8s-$version/src}"

[ -d "$src" ] || { echo "missing $src: run hack/build-control-plane.sh first" >&2; exit 1; }
[ -f "$gomod/go.mod" ] || { echo "missing $gomod/go.mod (the control-plane build module)" >&2; exit 1; }
mkdir -p "$work" "$out"
if [ ! -d "$work/k8s" ]; then
    cp -rs "$src" "$work/k8s"
    chmod -R u+w "$work/k8s"
fi
cp "$gomod/go.mod" "$gomod/go.sum" "$work/"
sed -i 's#^module .*#module resmgrvectors#' "$work/go.mod"
grep -q '^replace k8s.io/kubernetes =>' "$work/go.mod" || echo 'replace k8s.io/kubernetes => ./k8s' >>"$work/go.mod"

install() { rm -f "$work/k8s/pkg/kubelet/cm/$2/zz_vectors_test.go"; cp "$here/$1" "$work/k8s/pkg/kubelet/cm/$2/zz_vectors_test.go"; }
install cpumanager_vectors_test.go cpumanager
install cpustate_vectors_test.go cpumanager/state
install memstate_vectors_test.go memorymanager/state
install topology_vectors_test.go topologymanager
install memorymanager_vectors_test.go memorymanager
install devcheckpoint_vectors_test.go devicemanager/checkpoint

cd "$work"
if [ "${1:-}" = read ]; then
    # gen.sh read DIR: upstream's state code reads DIR/<case>/{cpu,memory}_manager_state
    # (with the policy in DIR/<case>/policy) and writes DIR/upstream-read-{cpu,memory}.json.
    READ_DIR="$2" GOFLAGS=-mod=mod go test -count=1 -run 'TestZZReadDir$' k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state
    READ_DIR="$2" GOFLAGS=-mod=mod go test -count=1 -run 'TestZZReadDirMemory$' k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state
    exit 0
fi
for pkg in ${RESMGR_VECTORS_PKGS:-cpumanager cpumanager/state memorymanager memorymanager/state topologymanager devicemanager/checkpoint}; do
    VECTORS_DIR="$out" GOFLAGS=-mod=mod go test -count=1 -timeout 30m -run TestZZWriteVectors "k8s.io/kubernetes/pkg/kubelet/cm/$pkg"
done
echo "vectors written to $out (Go $(go env GOVERSION), k8s.io/kubernetes $version)"
