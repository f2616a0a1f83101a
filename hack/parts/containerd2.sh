#!/usr/bin/env bash
# containerd v2 and runc built with Go from their modules at pinned releases,
# into the cache outside the repo: the runtime the containerd tests use by
# default (KPY_CONTAINERD=2; KPY_CONTAINERD=1.6 uses Debian's, see
# hack/parts/containerd.sh). Rebuilds only what is missing.
#
#   $KUBELET_CACHE/containerd-$CONTAINERD2_VERSION/bin/{containerd,containerd-shim-runc-v2,ctr}
#   $KUBELET_CACHE/runc-$RUNC_VERSION/runc
#
# The pins are repeated in kubelet/testing/containerd.py (a unit test checks
# that the two agree). runc is the release containerd's own CI pins
# (script/setup/runc-version in the containerd module).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
CONTAINERD2_VERSION="${CONTAINERD2_VERSION:-v2.4.2}"
RUNC_VERSION="${RUNC_VERSION:-v1.5.2}"
ctd="$KUBELET_CACHE/containerd-$CONTAINERD2_VERSION"
runc="$KUBELET_CACHE/runc-$RUNC_VERSION"
ctd_bins=(containerd containerd-shim-runc-v2 ctr)

have_all() {
    for b in "${ctd_bins[@]}"; do [ -x "$ctd/bin/$b" ] || return 1; done
    [ -x "$runc/runc" ]
}
have_all && exit 0

# runc's seccomp support is cgo against libseccomp.
apt_install gcc libc6-dev pkg-config libseccomp-dev
command -v go >/dev/null || { [ -x /usr/local/go/bin/go ] && export PATH="/usr/local/go/bin:$PATH"; }
command -v go >/dev/null || apt_install golang-go
mkdir -p "$ctd/src" "$ctd/bin" "$runc/src"
# Two callers at once (CI's part preparation and a developer's test run)
# would rewrite go.mod under each other's build.
exec 9>"$KUBELET_CACHE/.containerd2.build.lock"
flock 9
export GOFLAGS=-mod=mod

# A module of our own that requires the release: its go.mod lists the whole
# pruned graph, so minimal version selection builds what the release pins.
wrapper() {  # wrapper DIR MODULE VERSION PKG...
    local dir="$1" mod="$2" ver="$3"
    shift 3
    cd "$dir"
    printf 'module kubeletpy.local/%s\n\ngo 1.25.0\n\nrequire %s %s\n' \
        "$(basename "$(dirname "$dir")")" "$mod" "$ver" >go.mod
    {
        printf '//go:build tools\n\npackage tools\n\nimport (\n'
        for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
        printf ')\n'
    } >tools.go
    go mod tidy -e >/dev/null 2>&1 || true
    go mod download
}

missing=()
for b in "${ctd_bins[@]}"; do [ -x "$ctd/bin/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -gt 0 ]; then
    pkg=github.com/containerd/containerd/v2
    wrapper "$ctd/src" "$pkg" "$CONTAINERD2_VERSION" "$pkg/cmd/containerd" \
        "$pkg/cmd/containerd-shim-runc-v2" "$pkg/cmd/ctr"
    ldflags="-s -w -X $pkg/version.Version=$CONTAINERD2_VERSION -X $pkg/version.Package=$pkg"
    for b in "${missing[@]}"; do
        log "building $b $CONTAINERD2_VERSION"
        # Static, without cgo: btrfs is the only cgo snapshotter and devmapper
        # is not used here; the shim serves ttrpc only, as upstream builds it.
        tags="urfave_cli_no_docs no_btrfs no_devmapper"
        [ "$b" = containerd-shim-runc-v2 ] && tags="$tags no_grpc"
        CGO_ENABLED=0 nice go build -trimpath -gcflags=all=-dwarf=false -tags "$tags" -ldflags "$ldflags" \
            -o "$ctd/bin/$b.tmp" "$pkg/cmd/$b"
        mv "$ctd/bin/$b.tmp" "$ctd/bin/$b"
    done
fi

if [ ! -x "$runc/runc" ]; then
    wrapper "$runc/src" github.com/opencontainers/runc "$RUNC_VERSION" github.com/opencontainers/runc
    log "building runc $RUNC_VERSION"
    # Upstream's tags less libpathrs (a Rust library Debian bookworm does not
    # ship): runc then uses its pure-Go pathrs-lite, as its own fallback does.
    CGO_ENABLED=1 nice go build -trimpath -buildmode=pie -tags "seccomp urfave_cli_no_docs" \
        -ldflags "-X main.gitCommit=$RUNC_VERSION" -o "$runc/runc.tmp" github.com/opencontainers/runc
    mv "$runc/runc.tmp" "$runc/runc"
fi
"$ctd/bin/containerd" --version >&2
"$runc/runc" --version >&2
