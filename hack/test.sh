#!/usr/bin/env bash
# The test command: sets up everything it needs (venv, pinned deps, native
# builds, system packages and Go-built parts for the real-runtime tests), then
# runs lint, type checks, the Rust tests, the figure check and the pytest suite.
# Safe to run twice. Extra arguments go to pytest, e.g. `hack/test.sh -k config`.
#
# Real parts (hack/parts/*.sh) are prepared in the background while the Python
# and Rust set-up and the static checks run. A part whose set-up fails fails
# the run under CI=true (with the tail of its log); locally the tests that need
# it skip and say why (kubelet/testing/parts.py).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

# Timings of this run, written to out/test-timings.json at the end
# (python -m benches.ci_time turns one into a record).
TIMINGS="$REPO_ROOT/out/test-timings.json"
mkdir -p "$REPO_ROOT/out"
started="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
commit="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || commit="$commit-dirty"
machine="$(printf '{"cores": %s, "memory_gib": %s, "kernel": "%s", "loadavg_start": [%s]}' \
    "$(nproc)" "$(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)" "$(uname -r)" \
    "$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ',')")"
phases=""
phase="" phase_t0=0
step() {
    [ -n "$phase" ] && phases="$phases${phases:+, }\"$phase\": $((SECONDS - phase_t0))"
    phase="$*" phase_t0=$SECONDS
    log "$* (${SECONDS}s)"
}

PARTS_LOG="$REPO_ROOT/out/parts"
step "preparing the real parts in the background (logs in out/parts/)"
prepare_parts "$PARTS_LOG" hack/parts/*.sh &
parts_pid=$!
# Stop the background set-up (and the builds it started) if this script is
# interrupted or fails early.
kill_tree() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
trap 'kill_tree "$parts_pid"' EXIT

step "Python and native set-up"
ensure_env

step "ruff"
ruff check .
ruff format --check .
step "mypy"
mypy
step "cargo test / clippy (rust/)"
(cd rust && cargo test --quiet && cargo clippy --quiet --all-targets -- -D warnings)
step "figures against their records (python -m benches.report --check)"
python -m benches.report --check

step "waiting for the real parts"
wait "$parts_pid"
trap - EXIT
report_parts "$PARTS_LOG"

step "pytest (native kernels)"
# Tests marked slow (the long fault drills, the wheels) run with
# `hack/test.sh -m slow`: a later -m wins. CI lists the slowest tests.
durations=()
is_ci && durations=(--durations=50)
python -m pytest -q -rs -p no:cacheprovider "${durations[@]}" -m "not slow" "$@"
if [ $# -eq 0 ]; then
    # The unit suite once more on the pure-Python references.
    step "pytest (reference kernels: KUBELET_IMPL=reference, unit tests)"
    KUBELET_IMPL=reference python -m pytest -q -rs -p no:cacheprovider -m "not containerd and not cluster and not slow" tests/unit
fi
step "done"
parts_json=""
for rc in "$PARTS_LOG"/*.rc; do
    [ -e "$rc" ] || continue
    read -r code took <"$rc"
    parts_json="$parts_json${parts_json:+, }\"$(basename "$rc" .rc)\": $took"
done
printf '{"started": "%s", "commit": "%s", "ci": %s, "args": "%s", "machine": %s, "total_s": %s,\n "phases_s": {%s},\n "parts_s": {%s}}\n' \
    "$started" "$commit" "$(is_ci && echo true || echo false)" "${*//\"/}" "$machine" "$SECONDS" "$phases" "$parts_json" >"$TIMINGS"
