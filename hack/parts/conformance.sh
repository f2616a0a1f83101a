#!/usr/bin/env bash
# The node conformance harness (python -m benches.conformance) and its smoke
# test (marker `conformance`): etcd, containerd + runc + CNI from Debian, and,
# built with Go from the pinned k8s.io/kubernetes module, the control plane
# with its controllers, both kubelets' peers, agnhost, nnp, ginkgo and the
# trimmed e2e binary. The test images are made from these at run time.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_install etcd-server containerd runc containernetworking-plugins busybox-static gcc libc6-dev iproute2 curl
bash "$REPO_ROOT/hack/build-control-plane.sh" kube-apiserver kubectl kubelet \
    kube-controller-manager kube-scheduler agnhost nnp ginkgo e2e.test >/dev/null
