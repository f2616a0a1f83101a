#!/usr/bin/env bash
# The CSI test parts, built with Go into $KUBELET_CACHE/csi-parts/bin:
#   csi-hostpath, csi-registrar   the project's own (hack/parts/csi): a hostpath-style
#                                 driver and a registrar on the kubelet's plugin
#                                 registration API (k8s.io/kubelet pluginregistration/v1)
#   csi-resizer                   the project's stand-in for external-resizer (not on the
#                                 Go module proxy): the controller half of an expansion
#   hostpathplugin                the project's stand-in for csi-driver-host-path's binary
#                                 in its proxy mode only (the DRA e2e suite's proxy pod)
#   csi-provisioner, csi-attacher the kubernetes-csi sidecars, from their modules
#   csi-sanity                    csi-test's CSI protocol conformance suite
# Each upstream command is built inside a copy of its own module, so its go.mod
# (with its replace directives) and go.sum decide every dependency. Rebuilds only
# what is missing or changed; prints the bin dir. The containerd and control-plane
# parts the cluster tests also need come from their own scripts (containerd.sh,
# conformance.sh).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
CSI_TEST_VERSION="${CSI_TEST_VERSION:-v5.6.0}"
PROVISIONER_VERSION="${PROVISIONER_VERSION:-v6.4.0}"
ATTACHER_VERSION="${ATTACHER_VERSION:-v4.13.0}"
OUT="$KUBELET_CACHE/csi-parts"
mkdir -p "$OUT/bin" "$OUT/src"
exec 9>"$OUT/.build.lock"
flock 9
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || apt_install golang-go

# build_module MODULE VERSION PACKAGE NAME
build_module() {
    local mod="$1" ver="$2" pkg="$3" name="$4" dir src
    if [ -x "$OUT/bin/$name" ] && [ "$(cat "$OUT/bin/.$name.version" 2>/dev/null)" = "$mod@$ver" ]; then
        return 0
    fi
    log "building $name from $mod@$ver"
    dir="$(go mod download -json "$mod@$ver" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    src="$OUT/src/$name"
    rm -rf "$src"
    cp -r "$dir" "$src"
    chmod -R u+w "$src"
    (cd "$src" && CGO_ENABLED=0 GOFLAGS=-mod=mod nice go build -trimpath -gcflags=all=-dwarf=false \
        -ldflags "-s -w -X main.version=$ver" -o "$OUT/bin/$name.tmp" "$pkg")
    mv "$OUT/bin/$name.tmp" "$OUT/bin/$name"
    echo "$mod@$ver" >"$OUT/bin/.$name.version"
}

# Ours: rebuilt when a source file changes.
ours="$REPO_ROOT/hack/parts/csi"
stamp="$(cd "$ours" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
if [ "$(cat "$OUT/bin/.ours.stamp" 2>/dev/null)" != "$stamp" ] || [ ! -x "$OUT/bin/csi-hostpath" ] \
    || [ ! -x "$OUT/bin/csi-registrar" ] || [ ! -x "$OUT/bin/hostpathplugin" ] \
    || [ ! -x "$OUT/bin/csi-resizer" ]; then
    log "building csi-hostpath, csi-registrar, csi-resizer and hostpathplugin (hack/parts/csi)"
    (cd "$ours" && CGO_ENABLED=0 nice go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$OUT/bin/" ./cmd/...)
    echo "$stamp" >"$OUT/bin/.ours.stamp"
fi
build_module github.com/kubernetes-csi/csi-test/v5 "$CSI_TEST_VERSION" ./cmd/csi-sanity csi-sanity
build_module github.com/kubernetes-csi/external-attacher/v4 "$ATTACHER_VERSION" ./cmd/csi-attacher csi-attacher
build_module github.com/kubernetes-csi/external-provisioner/v6 "$PROVISIONER_VERSION" ./cmd/csi-provisioner csi-provisioner
echo "$OUT/bin"
