#!/usr/bin/env bash
# The node e2e harness (python -m benches.node_e2e) and its smoke test (marker
# `node_e2e`): containerd + runc + CNI, dbus-daemon (the private system bus of
# the systemd stand-ins) and util-linux's IPC tools from Debian; built with Go
# from the pinned k8s.io/kubernetes module: the suite (e2e_node.test, which
# runs its own etcd and API server), ginkgo, kubectl, and the binaries of the
# test images. The upstream kubelet comes from control-plane.sh.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_install containerd runc containernetworking-plugins busybox-static gcc libc6-dev iproute2 curl \
    dbus-daemon util-linux procps
bash "$REPO_ROOT/hack/build-control-plane.sh" ginkgo kubectl agnhost nnp sample-device-plugin \
    e2e_node.test >/dev/null
