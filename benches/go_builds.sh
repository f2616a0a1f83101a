#!/usr/bin/env bash
# What the Go builds of the parts cost, measured in CPU seconds (robust to a
# shared machine's load, unlike wall time). Needs hack/build-control-plane.sh
# to have run once (its module in ~/.cache/kubelet-py) and a warm build cache.
#
#   benches/go_builds.sh link     # warm cache: the eight commands one go build each, then all in one
#   benches/go_builds.sh dwarf    # cold cache: client-go's clientset with and without compiler DWARF
#
# Prints one line per build: wall, user and sys seconds (/usr/bin/time).
set -euo pipefail
source "$(dirname "$0")/../hack/lib.sh"
work="$(mktemp -d /tmp/go-builds-XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp -r "$KUBELET_CACHE/k8s-v1.34.4/src" "$work/src"
cd "$work/src"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
L="-s -w -X k8s.io/component-base/version.gitVersion=v1.34.4 -X main.Version=2.56"
P="k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kubelet
   k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler
   k8s.io/kubernetes/test/images/agnhost k8s.io/kubernetes/test/images/nonewprivs github.com/onsi/ginkgo/v2/ginkgo"
case "${1:-}" in
    link)
        mkdir -p "$work/sep" "$work/one"
        for p in $P; do
            /usr/bin/time -f "separate $(basename "$p"): wall %e user %U sys %S" \
                go build -trimpath -ldflags "$L" -o "$work/sep/" "$p"
        done
        # shellcheck disable=SC2086
        /usr/bin/time -f "one go build, all eight: wall %e user %U sys %S" \
            go build -trimpath -ldflags "$L" -o "$work/one/" $P ;;
    dwarf)
        for v in default nodwarf; do
            extra=()
            [ "$v" = nodwarf ] && extra=(-gcflags=all=-dwarf=false)
            mkdir -p "$work/cache-$v"
            GOCACHE="$work/cache-$v" /usr/bin/time -f "cold client-go, $v: wall %e user %U sys %S" \
                go build -trimpath "${extra[@]}" k8s.io/client-go/kubernetes
        done ;;
    *) echo "usage: benches/go_builds.sh link|dwarf" >&2; exit 2 ;;
esac
