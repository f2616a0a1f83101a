#!/usr/bin/env bash
# crictl built with Go from sigs.k8s.io/cri-tools, for tests marked `crictl`.
# Built through a small module of our own (go install pkg@version asks the
# proxy for the version list, which it refuses here).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
CRICTL_VERSION="${CRICTL_VERSION:-v1.34.0}"
dir="$KUBELET_CACHE/cri-tools-$CRICTL_VERSION"
[ -x "$dir/crictl" ] && exit 0
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || apt_install golang-go
mkdir -p "$dir/src"
cd "$dir/src"
# cri-tools pins release candidates of the k8s.io staging modules, which the
# checksum database here does not know: use the matching final release.
K8S_STAGING="${K8S_STAGING:-v0.34.4}"
{
    printf 'module kubeletpy.local/crictlbuild\n\ngo 1.24.0\n\nrequire sigs.k8s.io/cri-tools %s\n\n' "$CRICTL_VERSION"
    for m in api apimachinery apiserver client-go component-base cri-api cri-client kubelet \
        cli-runtime component-helpers kubectl metrics; do
        printf 'replace k8s.io/%s => k8s.io/%s %s\n' "$m" "$m" "$K8S_STAGING"
    done
} >go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/cri-tools/cmd/crictl"\n' >tools.go
log "building crictl $CRICTL_VERSION"
# The checksum database is not reachable for cri-tools itself through this
# proxy; everything else it pulls in is verified as usual.
export GONOSUMDB=sigs.k8s.io/cri-tools GOFLAGS=-mod=mod
go mod tidy -e >/dev/null 2>&1 || true
CGO_ENABLED=0 nice go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" \
    -o "$dir/crictl.tmp" sigs.k8s.io/cri-tools/cmd/crictl
mv "$dir/crictl.tmp" "$dir/crictl"
