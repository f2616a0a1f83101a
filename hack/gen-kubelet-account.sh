#!/usr/bin/env bash
# Regenerate the upstream side of the configuration account from the pinned
# Go modules: every KubeletConfiguration field (with defaults), every kubelet
# flag (with deprecation and the field it writes) and every feature gate the
# kubelet binary registers, into kubelet/apis/config/data/*.jsonl; the
# files kubeadm and a kind-style cluster write for a node, into
# tests/unit/cmd/testdata/; then docs/configuration.md from those lists and
# the state table (kubelet/apis/config/data/account.tsv).
#
#   hack/gen-kubelet-account.sh
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
WORK="$KUBELET_CACHE/kubelet-account-$K8S_VERSION"
mkdir -p "$WORK"
exec 9>"$WORK/.lock"
flock 9

command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
    cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
    cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
    kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
    mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)
{
    echo "module kubeletpy.local/kubeletaccount"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    for m in "${staging[@]}"; do echo "replace k8s.io/$m => k8s.io/$m $STAGING_VERSION"; done
} >"$WORK/go.mod.new"
if ! cmp -s "$WORK/go.mod.new" "$WORK/go.mod.header" 2>/dev/null; then
    cp "$WORK/go.mod.new" "$WORK/go.mod"
    cp "$WORK/go.mod.new" "$WORK/go.mod.header"
fi
cp "$ROOT"/hack/kubelet-account/*.go "$WORK/"
cd "$WORK"
log "resolving k8s.io/kubernetes $K8S_VERSION for the account generator"
GOFLAGS=-mod=mod go mod tidy >/dev/null
log "reading the kubelet's fields, flags and gates"
GOFLAGS=-mod=mod nice go run . -out "$ROOT/kubelet/apis/config/data" \
    -kubeadm-out "$ROOT/tests/unit/cmd/testdata"
cd "$ROOT"
log "writing docs/configuration.md"
[ "${SKIP_DOCS:-}" = 1 ] || KUBELET_IMPL="${KUBELET_IMPL:-reference}" python -m kubelet.apis.config.account --write-docs docs/configuration.md
