#!/usr/bin/env bash
# Build kube-apiserver and kubectl (and optionally the upstream kubelet) with Go
# from the k8s.io/kubernetes module at a pinned release, into the cache outside
# the repo. The module's staging repos (k8s.io/api, client-go, ...) are replaced
# by their matching v0.x releases, which is what makes k8s.io/kubernetes
# buildable as a dependency. Rebuilds only what is missing.
#
#   hack/build-control-plane.sh [kube-apiserver kubectl kubelet]
set -euo pipefail
source "$(dirname "$0")/lib.sh"

K8S_VERSION="${K8S_VERSION:-v1.34.4}"
STAGING_VERSION="v0.${K8S_VERSION#v1.}"
OUT="$KUBELET_CACHE/k8s-$K8S_VERSION"
SRC="$OUT/src"
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(kube-apiserver kubectl)

missing=()
for t in "${targets[@]}"; do [ -x "$OUT/bin/$t" ] || missing+=("$t"); done
[ ${#missing[@]} -eq 0 ] && { echo "$OUT/bin"; exit 0; }

command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || apt_install golang-go
mkdir -p "$SRC" "$OUT/bin"
cd "$SRC"
staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
    cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
    cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
    kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
    mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller)
{
    echo "module kubeletpy.local/k8sbuild"
    echo
    echo "go 1.24.0"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    for m in "${staging[@]}"; do echo "replace k8s.io/$m => k8s.io/$m $STAGING_VERSION"; done
} >go.mod
cat >tools.go <<'GO'
//go:build tools

// Package tools pins the commands this recipe builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
log "resolving k8s.io/kubernetes $K8S_VERSION (staging $STAGING_VERSION)"
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
GOFLAGS=-mod=mod go mod download
for t in "${missing[@]}"; do
    log "building $t $K8S_VERSION"
    # The version is stamped the way the upstream build does, so the API server
    # and clients report a real release.
    minor="${K8S_VERSION#v1.}"
    minor="${minor%%.*}"
    ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
    ldflags="$ldflags -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
    CGO_ENABLED=0 GOFLAGS=-mod=mod nice go build -trimpath -ldflags "$ldflags" -o "$OUT/bin/$t.tmp" "k8s.io/kubernetes/cmd/$t"
    mv "$OUT/bin/$t.tmp" "$OUT/bin/$t"
done
echo "$OUT/bin"
