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
build_e2e_suite "$K8S_VERSION" "$OUT" e2e-dra.test e2edra dra_test.go "$MAIN"
