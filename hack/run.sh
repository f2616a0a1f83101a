#!/usr/bin/env bash
# The kubelet's main job, as a demo: standalone mode with the sample static
# pods (samples/static-pods) on the project's simulated CRI runtime, served on
# localhost. Sets up what it needs first (venv, native builds). Ctrl-C stops it.
#
#   hack/run.sh                   # simulated runtime
#   hack/run.sh --containerd      # real containers: a private containerd + runc
#   KUBELET_DEMO_DIR=/tmp/x hack/run.sh
#
# Without --containerd the demo also uses containerd when one is already
# running on /run/containerd/containerd.sock and answers CRI calls.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
ensure_env

DEMO="${KUBELET_DEMO_DIR:-$REPO_ROOT/out/demo}"
mkdir -p "$DEMO/root" "$DEMO/logs" "$DEMO/run"

use_containerd=""
if [ "${1:-}" = "--containerd" ]; then
    use_containerd=private
    shift
elif [ -S /run/containerd/containerd.sock ] && command -v ctr >/dev/null &&
    ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; then
    use_containerd=system
fi

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

if [ "$use_containerd" = private ]; then
    bash hack/parts/containerd.sh
    log "starting a private containerd with runc under $DEMO/containerd"
    # Debian's containerd 1.6 (hack/parts/containerd.sh) unless KPY_CONTAINERD says
    # otherwise: containerd 2 is a Go build (hack/parts/containerd2.sh).
    python -m kubelet.testing.containerd up --dir "$DEMO/containerd" --containerd "${KPY_CONTAINERD:-1.6}" \
        >"$DEMO/logs/containerd-harness.log" 2>&1 &
    pids+=($!)
    SOCK="$DEMO/containerd/ctd.sock"
    for _ in $(seq 300); do grep -Eq "^containerd [^ ]+ ready: " "$DEMO/logs/containerd-harness.log" 2>/dev/null && break; sleep 0.2; done
    grep -Eq "^containerd [^ ]+ ready: " "$DEMO/logs/containerd-harness.log" ||
        { echo "containerd did not start; see $DEMO/logs/containerd-harness.log" >&2; exit 1; }
    RUNTIME="containerd with runc (private, started by this script), socket unix://$SOCK"
elif [ "$use_containerd" = system ]; then
    SOCK=/run/containerd/containerd.sock
    RUNTIME="the system's containerd, socket unix://$SOCK (images must be present or pullable)"
else
    SOCK="$DEMO/run/simruntime.sock"
    rm -f "$SOCK"
    log "starting the simulated runtime on unix://$SOCK"
    kubelet-simruntime --listen "unix://$SOCK" >"$DEMO/logs/simruntime.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [ -S "$SOCK" ] && break; sleep 0.1; done
    [ -S "$SOCK" ] || { echo "simulated runtime did not start; see $DEMO/logs/simruntime.log" >&2; exit 1; }
    RUNTIME="simulated CRI runtime (kubelet-simruntime), socket unix://$SOCK"
fi

cat <<MSG

  Runtime:     $RUNTIME
  Static pods: $REPO_ROOT/samples/static-pods
  Look at:     curl -s http://127.0.0.1:10255/pods | python -m json.tool
               curl -s http://127.0.0.1:10248/healthz
               curl -sk https://127.0.0.1:10250/configz
               curl -s http://127.0.0.1:10255/metrics | grep ^kubelet_
  Logs:        $DEMO/logs (runtime), container logs under $DEMO/root/pod-logs

MSG
kubelet \
    --config hack/demo/kubelet-config.yaml \
    --pod-manifest-path "$REPO_ROOT/samples/static-pods" \
    --container-runtime-endpoint "unix://$SOCK" \
    --root-dir "$DEMO/root" \
    --cert-dir "$DEMO/root/pki" \
    --pod-logs-dir "$DEMO/root/pod-logs" \
    --hostname-override "$(hostname | tr '[:upper:]' '[:lower:]')" "$@" &
pids+=($!)
wait "${pids[-1]}"
