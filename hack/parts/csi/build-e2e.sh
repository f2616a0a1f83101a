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
build_e2e_suite "$K8S_VERSION" "$OUT" e2e-storage.test e2estorage storage_test.go "$MAIN"
