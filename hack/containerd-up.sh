#!/usr/bin/env bash
# Start a private containerd (runc, cgroupfs, bridge CNI, local busybox and pause
# images) for trying the kubelet by hand; Ctrl-C stops it and cleans up.
#   hack/containerd-up.sh [DIR]        (default /tmp/kubelet-py-containerd)
# containerd v2 built from its module by default; KPY_CONTAINERD=1.6 for Debian's.
# Then: kubelet --container-runtime-endpoint unix://DIR/ctd.sock ...
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "containerd-up: needs root (runc, mounts, network namespaces)" >&2
    exit 1
fi
bash hack/parts/containerd.sh
[ "${KPY_CONTAINERD:-2}" = 1.6 ] || bash hack/parts/containerd2.sh
# shellcheck disable=SC1091
[ -f .venv/bin/activate ] && . .venv/bin/activate
exec python -m kubelet.testing.containerd up --dir "${1:-/tmp/kubelet-py-containerd}"
