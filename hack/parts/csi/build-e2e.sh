#!/usr/bin/env bash
# e2e-storage.test: the upstream storage test suites of the pinned
# k8s.io/kubernetes module (test/e2e/storage/testsuites) for a pre-installed
# driver through test/e2e/storage/external (--storage.testdriver=FILE), and
# test/e2e/storage itself (its in-tree drivers' runs of those suites and its
# own specs, such as the atomic-writer volumes' subPaths), and nothing else,
# built into the control-plane cache next to e2e.test by a small test main
# generated here. For benches/storage (python -m benches.storage);
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

# The test main is the conformance one (build-control-plane.sh writes it to
# e2econformance/) with the storage suites' package instead of the common ones.
conf="$SRC/e2econformance/conformance_test.go"
[ -f "$conf" ] || { echo "no $conf: build-control-plane.sh did not write it" >&2; exit 1; }
MAIN="$(sed -e 's/^package e2econformance/package e2estorage/' \
    -e 's|^// Package e2econformance .*|// Package e2estorage runs the storage suites of k8s.io/kubernetes for --storage.testdriver drivers.|' \
    -e '/^\/\/ (test\/e2e\/common/d' \
    -e 's|_ "k8s.io/kubernetes/test/e2e/common/node"|_ "k8s.io/kubernetes/test/e2e/storage"\n\t_ "k8s.io/kubernetes/test/e2e/storage/external"|' \
    -e '/_ "k8s.io\/kubernetes\/test\/e2e\/common\/storage"/d' \
    -e 's/func TestConformance(/func TestStorage(/' \
    -e 's/"node conformance", suiteConfig/"storage", suiteConfig/' "$conf")"
grep -q 'storage/external' <<<"$MAIN" && grep -q 'test/e2e/storage"' <<<"$MAIN" || { echo "could not derive the storage test main from $conf" >&2; exit 1; }
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
log "building e2e-storage.test (test/e2e/storage and storage/external) $K8S_VERSION"
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
