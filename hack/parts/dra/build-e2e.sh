#!/usr/bin/env bash
# e2e-dra.test: the upstream cluster e2e suite of dynamic resource allocation
# (test/e2e/dra of the pinned k8s.io/kubernetes module) and nothing else, built
# into the control-plane cache next to e2e.test by a test main derived from the
# conformance one, with the embedded testing manifests (the DRA test driver's
# proxy pod is read from them) as upstream's e2e.test has them. For
# benches/dra (python -m benches.dra); not part of CI (hack/test.sh runs
# hack/parts/*.sh only).
#
#   hack/parts/dra/build-e2e.sh        prints the bin dir
set -euo pipefail
source "$(dirname "$0")/../../lib.sh"
K8S_VERSION="${K8S_VERSION:-v1.34.4}"
OUT="$KUBELET_CACHE/k8s-$K8S_VERSION"
bash "$REPO_ROOT/hack/build-control-plane.sh" kube-apiserver kubectl kubelet \
    kube-controller-manager kube-scheduler agnhost nnp ginkgo e2e.test >/dev/null
SRC="$OUT/src"

conf="$SRC/e2econformance/conformance_test.go"
[ -f "$conf" ] || { echo "no $conf: build-control-plane.sh did not write it" >&2; exit 1; }
MAIN="$(sed -e 's/^package e2econformance/package e2edra/' \
    -e 's|^// Package e2econformance .*|// Package e2edra runs the DRA suite of k8s.io/kubernetes (test/e2e/dra).|' \
    -e '/^\/\/ (test\/e2e\/common/d' \
    -e 's|_ "k8s.io/kubernetes/test/e2e/common/node"|_ "k8s.io/kubernetes/test/e2e/dra"\n\t"k8s.io/kubernetes/test/e2e/framework/testfiles"\n\te2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"|' \
    -e '/_ "k8s.io\/kubernetes\/test\/e2e\/common\/storage"/d' \
    -e 's|^\tframework.AfterReadingAllFlags(&framework.TestContext)$|&\n\ttestfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())|' \
    -e 's/func TestConformance(/func TestDRA(/' \
    -e 's/"node conformance", suiteConfig/"dra", suiteConfig/' "$conf")"
grep -q 'test/e2e/dra"' <<<"$MAIN" && grep -q 'AddFileSource' <<<"$MAIN" \
    || { echo "could not derive the DRA test main from $conf" >&2; exit 1; }
stamp="$(printf '%s' "$MAIN" | sha256sum | cut -c1-16)"
if [ -x "$OUT/bin/e2e-dra.test" ] && [ "$(cat "$OUT/bin/.e2e-dra.test.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "$OUT/bin"
    exit 0
fi
command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
exec 9>"$OUT/.build.lock"
flock 9
cd "$SRC"
mkdir -p e2edra
printf '%s\n' "$MAIN" >e2edra/dra_test.go
log "building e2e-dra.test (test/e2e/dra) $K8S_VERSION"
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
minor="${K8S_VERSION#v1.}"
minor="${minor%%.*}"
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
CGO_ENABLED=0 GOFLAGS=-mod=mod nice go test -c -trimpath -ldflags "$ldflags" \
    -o "$OUT/bin/e2e-dra.test.tmp" ./e2edra
mv "$OUT/bin/e2e-dra.test.tmp" "$OUT/bin/e2e-dra.test"
echo "$stamp" >"$OUT/bin/.e2e-dra.test.stamp"
echo "$OUT/bin"
