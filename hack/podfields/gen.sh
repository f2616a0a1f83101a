#!/usr/bin/env bash
# Regenerate kubelet/core_v1/data/podspec_fields.json from the pinned
# k8s.io/api (through the control-plane build module, so the same version the
# harnesses run): the fields of a pod's spec this kubelet's API version knows.
# Needs Go and that module (hack/build-control-plane.sh).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
version="${K8S_VERSION:-v1.34.4}"
gomod="${K8S_BUILD_GOMOD:-$HOME/.cache/kubelet-py/k8s-$version/src}"
work="${PODFIELDS_WORK:-/tmp/podfields-$(id -u)}"
[ -f "$gomod/go.mod" ] || { echo "missing $gomod/go.mod (the control-plane build module)" >&2; exit 1; }
mkdir -p "$work"
cp "$gomod/go.mod" "$gomod/go.sum" "$here/main.go" "$work/"
sed -i 's#^module .*#module podfields#' "$work/go.mod"
api="$(cd "$work" && GOFLAGS=-mod=mod go list -m -f '{{.Path}}@{{.Version}}' k8s.io/api)"
(cd "$work" && GOFLAGS=-mod=mod go run . "$api core/v1 PodSpec") >"$repo/kubelet/core_v1/data/podspec_fields.json"
echo "wrote kubelet/core_v1/data/podspec_fields.json from $api"
