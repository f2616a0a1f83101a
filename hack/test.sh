#!/usr/bin/env bash
# The test command: sets up everything it needs (venv, pinned deps, native
# builds, system packages and Go-built parts for the real-runtime tests), then
# runs lint, type checks, the Rust tests, the figure check and the pytest suite.
# Safe to run twice. Extra arguments go to pytest, e.g. `hack/test.sh -k config`.
#
# Real parts (hack/parts/*.sh) are prepared in the background, one after
# another in TEST_GROUPS' order, while the Python and Rust set-up, the static checks
# and the tests run: each group of tests starts as soon as the parts it needs
# are ready (tests/fixtures/part_groups.py knows which a test needs). A part
# whose set-up fails fails the run under CI=true (with the tail of its log)
# and its group does not run; locally the tests that need it skip and say why
# (kubelet/testing/parts.py). Every group runs whatever the others did.
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

# The groups of tests, "name:parts it adds", in the order they run; the parts
# are built in this order too. The Debian parts first: the first group (unit,
# equivalence, simulated runtime: most tests, few minutes) needs nothing
# Go-built. Then the control plane, the longest build, whose tests on the
# simulated runtime are the longest group (the soak, the API outages, the
# density smoke); containerd 2 next, for the containerd tests and the cluster
# tests on containerd. The parts of the small groups last, metrics-server (one
# test) at the very end. Parts no group names are built after those, and the
# last group waits for them too.
TEST_GROUPS=(
    "no Go-built parts:containerd dbus"
    "control plane:control-plane"
    "containerd:containerd2"
    "conformance:conformance"
    "node e2e:node-e2e"
    "crictl:crictl"
    "csi:csi"
    "metrics-server:metrics-server"
)
order=()
for g in "${TEST_GROUPS[@]}"; do
    read -r -a ps <<<"${g#*:}"
    for p in "${ps[@]}"; do order+=("hack/parts/$p.sh"); done
done
rest=()
for f in hack/parts/*.sh; do
    [[ " ${order[*]} " == *" $f "* ]] || { order+=("$f"); rest+=("$(basename "$f" .sh)"); }
done
[ ${#rest[@]} -eq 0 ] || TEST_GROUPS[-1]="${TEST_GROUPS[-1]} ${rest[*]}"

PARTS_LOG="$REPO_ROOT/out/parts"
step "preparing the real parts in the background (logs in out/parts/)"
prepare_parts "$PARTS_LOG" "${order[@]}" &
parts_pid=$!
# Stop the background set-up (and the builds it started) if this script is
# interrupted or fails early.
kill_tree() {
    local child
    for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}
ref_pid=""
trap 'kill_tree "$parts_pid"; [ -z "$ref_pid" ] || kill_tree "$ref_pid"' EXIT

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

# Tests marked slow (the long fault drills, the wheels) run with
# `hack/test.sh -m slow`: a later -m wins. CI lists the slowest tests.
durations=()
is_ci && durations=(--durations=50)
outcome=0
if [ $# -gt 0 ]; then
    # Arguments: one pytest run once every part is ready.
    step "waiting for the real parts"
    wait "$parts_pid"
    trap - EXIT
    report_parts "$PARTS_LOG"
    step "pytest $*"
    python -m pytest -q -rs -p no:cacheprovider "${durations[@]}" -m "not slow" "$@" || outcome=$?
else
    # run_group NAME READY EARLIER: the group's tests on the native kernels.
    # After the first group (no Go-built parts) the unit suite runs once more
    # on the pure-Python references, niced in the background beside the later
    # groups (mostly waiting on kubelets and API servers), as the Go builds do.
    ref_log="$REPO_ROOT/out/pytest-reference.log"
    run_group() {
        local sel=(--parts-ready="$2") rc=0
        [ -z "$3" ] || sel+=(--parts-earlier="$3")
        step "pytest: $1 (native kernels)"
        # KPY_TEST_PATHS: only these test paths (a quick run of the groups).
        # -rfEs: each group ends with its failures and errors listed (and skips).
        # shellcheck disable=SC2086
        python -m pytest -q -rfEs -p no:cacheprovider "${durations[@]}" -m "not slow" "${sel[@]}" \
            ${KPY_TEST_PATHS:-} || rc=$?
        if [ -z "$3" ]; then
            log "pytest (reference kernels: KUBELET_IMPL=reference, unit tests) in the background, log in $ref_log"
            (
                t0=$SECONDS rrc=0
                KUBELET_IMPL=reference nice python -m pytest -q -rfEs -p no:cacheprovider \
                    -m "not containerd and not cluster and not slow" "${sel[@]}" tests/unit \
                    >"$ref_log" 2>&1 || rrc=$?
                echo "$rrc $((SECONDS - t0))" >"$ref_log.rc"
            ) &
            ref_pid=$!
        fi
        [ $rc -eq 0 ] || [ $rc -eq 5 ]  # 5: no test in this group
    }
    rm -f "$ref_log" "$ref_log.rc"
    run_groups "$PARTS_LOG" "$parts_pid" run_group "${TEST_GROUPS[@]}" || outcome=$?
    wait "$parts_pid" || true
    trap - EXIT
    if [ -n "$ref_pid" ]; then
        step "waiting for the reference-kernel pass"
        wait "$ref_pid" || true
        read -r rrc took <"$ref_log.rc" || rrc=1 took=null
        ref_json=", \"pytest: reference kernels (background)\": $took"
        log "pytest (reference kernels), ${took}s in the background: $(tail -n 1 "$ref_log")"
        if [ "$rrc" != 0 ] && [ "$rrc" != 5 ]; then
            cat "$ref_log" >&2
            log "FAILED: the reference-kernel pass (exit $rrc)"
            outcome=1
        fi
    fi
fi
step "done"
parts_json="" started_json=""
for rc in "$PARTS_LOG"/*.rc; do
    [ -e "$rc" ] || continue
    read -r code took at _ <"$rc"
    parts_json="$parts_json${parts_json:+, }\"$(basename "$rc" .rc)\": $took"
    started_json="$started_json${started_json:+, }\"$(basename "$rc" .rc)\": ${at:-null}"
done
printf '{"started": "%s", "commit": "%s", "ci": %s, "args": "%s", "machine": %s, "total_s": %s, "exit": %s,\n "phases_s": {%s},\n "parts_s": {%s},\n "parts_started_at_s": {%s}}\n' \
    "$started" "$commit" "$(is_ci && echo true || echo false)" "${*//\"/}" "$machine" "$SECONDS" "$outcome" "$phases${ref_json:-}" "$parts_json" "$started_json" >"$TIMINGS"
exit "$outcome"
