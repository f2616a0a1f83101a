#!/usr/bin/env bash
# The test command: sets up everything it needs (venv, pinned deps, native
# builds, system packages for the real-runtime tests), then runs lint, type
# checks, the Rust tests and the pytest suite. Safe to run twice.
# Extra arguments go to pytest, e.g. `hack/test.sh -k config`.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
ensure_env

# Real parts the tests start themselves (each script installs what is missing).
for prep in hack/parts/*.sh; do
    [ -e "$prep" ] || continue
    log "preparing $(basename "$prep" .sh)"
    bash "$prep" || log "WARNING: $prep failed; tests that need it will skip and say why"
done

log "ruff"
ruff check .
ruff format --check .
log "mypy"
mypy
log "cargo test / clippy (rust/)"
(cd rust && cargo test --quiet && cargo clippy --quiet --all-targets -- -D warnings)

log "pytest (native kernels)"
# Tests marked slow (the long fault drills, certificate rotation, the wheels)
# run with `hack/test.sh -m slow`: a later -m wins.
python -m pytest -q -rs -p no:cacheprovider -m "not slow" "$@"
if [ $# -eq 0 ]; then
    # The unit suite once more on the pure-Python references.
    log "pytest (reference kernels: KUBELET_IMPL=reference, unit tests)"
    KUBELET_IMPL=reference python -m pytest -q -rs -p no:cacheprovider -m "not containerd and not cluster and not slow" tests/unit
fi
