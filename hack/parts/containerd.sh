#!/usr/bin/env bash
# containerd + runc + CNI plugins from Debian, busybox-static for the test
# images, for tests marked `containerd` (the harness starts containerd itself).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_install containerd runc containernetworking-plugins busybox-static gcc libc6-dev
apt_install docker-registry skopeo apache2-utils  # htpasswd: the pull-secret test registry
# tmux drives the interactive `kubectl exec -it` test (a real terminal).
apt_install tmux
