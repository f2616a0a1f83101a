#!/usr/bin/env bash
# Build the wheels an operator installs: kubelet-native (Rust, maturin, one
# abi3 wheel for CPython >= 3.11) and kubelet (with its compiled Cython modules
# and generated CRI stubs), both release builds, into DIR (default dist/).
# `hack/build-wheels.sh --wheelhouse` also fills $KUBELET_CACHE/wheelhouse with
# binary wheels of every dependency (pinned by constraints.txt), so that an
# install needs neither a compiler nor, after the first time, the network:
#   pip install --no-index --find-links dist --find-links ~/.cache/kubelet-py/wheelhouse kubelet
set -euo pipefail
# shellcheck source=hack/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

wheelhouse=0
out="$REPO_ROOT/dist"
for a in "$@"; do
    case "$a" in
        --wheelhouse) wheelhouse=1 ;;
        *) out="$(realpath -m "$a")" ;;
    esac
done
ensure_env
mkdir -p "$out"
python -m pip show -q build >/dev/null 2>&1 || python -m pip install -q -c "$REPO_ROOT/constraints.txt" build

log "kubelet-native wheel (maturin, release, abi3)"
(cd "$REPO_ROOT/rust" && maturin build --release --quiet --out "$out")
log "kubelet wheel (python -m build: Cython modules, CRI stubs)"
# From a copy of the tree (tracked and new files, nothing ignored): setuptools
# would otherwise reuse a stale build/ and write generated files into the checkout.
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
(cd "$REPO_ROOT" && git ls-files -z -co --exclude-standard -- . ':!rust' ':!benches' ':!tests' ':!docs' \
    | xargs -0 cp --parents -t "$src" 2>/dev/null || true)
python -m build --wheel --no-isolation --outdir "$out" "$src" >/dev/null

if [ "$wheelhouse" = 1 ]; then
    log "dependency wheels into $KUBELET_CACHE/wheelhouse"
    deps="$(python - "$REPO_ROOT/pyproject.toml" <<'PY'
import sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(" ".join(x for x in d["dependencies"] if not x.startswith("kubelet-native")))
PY
)"
    # shellcheck disable=SC2086
    python -m pip download -q --only-binary=:all: -c "$REPO_ROOT/constraints.txt" \
        -d "$KUBELET_CACHE/wheelhouse" $deps
fi
ls -1 "$out"/*.whl
