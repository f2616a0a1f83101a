#!/usr/bin/env bash
# Debian's dbus-daemon for the graceful node shutdown tests: they start a
# private system bus and a logind stand-in on it (kubelet/testing/login1.py).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
apt_install dbus-daemon
