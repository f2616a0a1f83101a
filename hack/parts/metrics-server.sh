#!/usr/bin/env bash
# metrics-server built with Go from sigs.k8s.io/metrics-server, for the `kubectl top`
# test (marked `cluster` and `containerd`). Built through a small module of our own
# into the cache dir, like crictl.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
METRICS_SERVER_VERSION="${METRICS_SERVER_VERSION:-v0.8.0}"
dir="$KUBELET_CACHE/metrics-server-$METRICS_SERVER_VERSION"
[ -x "$dir/metrics-server" ] && exit 0
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || apt_install golang-go
mkdir -p "$dir/src"
cd "$dir/src"
printf 'module kubeletpy.local/metricsserverbuild\n\ngo 1.24.4\n\nrequire sigs.k8s.io/metrics-server %s\n' \
    "$METRICS_SERVER_VERSION" >go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/metrics-server/cmd/metrics-server"\n' >tools.go
log "building metrics-server $METRICS_SERVER_VERSION"
# The checksum database does not know metrics-server itself through this proxy;
# everything it pulls in is verified as usual.
export GONOSUMDB=sigs.k8s.io/metrics-server GOFLAGS=-mod=mod
go mod tidy -e >/dev/null 2>&1 || true
CGO_ENABLED=0 nice go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" \
    -o "$dir/metrics-server.tmp" sigs.k8s.io/metrics-server/cmd/metrics-server
mv "$dir/metrics-server.tmp" "$dir/metrics-server"
