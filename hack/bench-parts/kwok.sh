#!/usr/bin/env bash
# kwok (sigs.k8s.io/kwok) built with Go from its module, for the density harness's
# ceiling: a "kubelet" that drives pods on the control plane with no runtime at all.
# Bench-only: not under hack/parts/, so hack/test.sh (and CI) does not build it; no
# test needs it.
# Built through a small module of our own into the cache dir, like metrics-server,
# under a lock (two harnesses may ask at once).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
dir="$KUBELET_CACHE/kwok-$KWOK_VERSION"
[ -x "$dir/kwok" ] && [ -d "$dir/stages" ] && exit 0
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || apt_install golang-go
mkdir -p "$dir/src"
exec 9>"$dir/.build.lock"
flock 9
[ -x "$dir/kwok" ] && [ -d "$dir/stages" ] && exit 0
cd "$dir/src"
printf 'module kubeletpy.local/kwokbuild\n\ngo 1.24.4\n\nrequire sigs.k8s.io/kwok %s\n' \
    "$KWOK_VERSION" >go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' >tools.go
log "building kwok $KWOK_VERSION"
export GOFLAGS=-mod=mod
go mod tidy -e >/dev/null 2>&1 || true
CGO_ENABLED=0 nice go build -trimpath -ldflags "-s -w" -o "$dir/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
mv "$dir/kwok.tmp" "$dir/kwok"
# The Stages kwok acts by (it does nothing without them), from the same module:
# nodes initialized at once and kept alive by lease, pods made Ready, completed
# (Job pods) and deleted at once ("fast", as kwokctl's default).
mod="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
mkdir -p "$dir/stages.tmp"
cp "$mod/kustomize/stage/node/fast/node-initialize.yaml" \
   "$mod/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
   "$mod"/kustomize/stage/pod/fast/pod-{ready,complete,delete}.yaml "$dir/stages.tmp/"
rm -rf "$dir/stages" && mv "$dir/stages.tmp" "$dir/stages"
