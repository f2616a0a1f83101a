#!/usr/bin/env bash
# etcd (Debian etcd-server 3.4 works with kube-apiserver v1.34) and
# kube-apiserver, kubectl, kube-controller-manager and kube-scheduler built from
# k8s.io/kubernetes, for tests marked `cluster`.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_install etcd-server
# apt may start etcd as a service where there is an init system: tests run their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    systemctl stop etcd || true
fi
# The upstream kubelet too: the density benchmark runs it side by side with ours.
# The controllers and the scheduler for the cluster tests that ask for them
# (ControlPlane(controllers=True)): in the same `go build`, so the tests marked
# `cluster` can run once this part is ready, before the conformance part.
bash "$REPO_ROOT/hack/build-control-plane.sh" kube-apiserver kubectl kubelet \
    kube-controller-manager kube-scheduler >/dev/null
