# Shared set-up for the project's scripts: source it, then call ensure_env.
# Everything here is idempotent: a second run only redoes what changed.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${KUBELET_VENV:-$REPO_ROOT/.venv}"
# Binaries built from Go modules (crictl, kube-apiserver, ...) live outside the repo.
export KUBELET_CACHE="${KUBELET_CACHE:-$HOME/.cache/kubelet-py}"
mkdir -p "$KUBELET_CACHE"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# apt_install PKG... installs the Debian packages that are missing.
apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "apt-get install ${missing[*]}"
    # hack/test.sh sets up parts while it builds the venv: one apt at a time.
    # The package lists are fetched once an hour, not by every part that
    # installs something (on a new machine each fetch takes tens of seconds);
    # an install that fails on older lists fetches them and tries again.
    (
        flock 8
        local stamp="$KUBELET_CACHE/.apt-lists-updated"
        if [ -z "$(find "$stamp" -mmin -60 2>/dev/null)" ]; then
            as_root apt-get update -qq && touch "$stamp"
        fi
        apt_get_install "${missing[@]}" || {
            as_root apt-get update -qq && touch "$stamp"
            apt_get_install "${missing[@]}"
        }
    ) 8>"$KUBELET_CACHE/.apt.lock"
}

apt_get_install() {
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
        --no-install-recommends "$@" >/dev/null
}

find_python() {
    for py in python3.11 python3.12 python3.13 python3; do
        if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
            echo "$py"; return 0
        fi
    done
    return 1
}

ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        log "cargo not found: installing Debian's rust toolchain"
        apt_install cargo rustc
    fi
}

# ensure_env builds the venv, installs pinned dependencies, and builds the
# native parts (Rust via maturin, Cython via setuptools) in release mode.
ensure_env() {
    local py
    py="$(find_python)" || { echo "need Python >= 3.11" >&2; exit 1; }
    ensure_rust
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating venv $VENV"
        "$py" -m venv "$VENV"
    fi
    # shellcheck disable=SC1091
    . "$VENV/bin/activate"
    local stamp="$VENV/.kubelet-deps" want
    want="$(cat "$REPO_ROOT/constraints.txt" "$REPO_ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
        log "installing Python dependencies (constraints.txt)"
        python -m pip install -q --upgrade pip
        python -m pip install -q -c "$REPO_ROOT/constraints.txt" \
            maturin Cython setuptools wheel grpcio-tools
        python -m pip install -q -c "$REPO_ROOT/constraints.txt" \
            $(python - "$REPO_ROOT/pyproject.toml" <<'PY'
import sys, tomllib
d = tomllib.load(open(sys.argv[1], "rb"))["project"]
deps = [x for x in d["dependencies"] + d["optional-dependencies"]["test"] if not x.startswith("kubelet-native")]
print(" ".join(f"'{x}'" if " " in x else x for x in deps))
PY
)
        echo "$want" >"$stamp"
    fi
    build_native
}

# build_native rebuilds what changed: the Rust extension (release) and the
# package with its Cython modules and CRI stubs, installed editable.
build_native() {
    local rstamp="$VENV/.kubelet-rust" rwant pstamp="$VENV/.kubelet-pkg" pwant
    rwant="$(cd "$REPO_ROOT/rust" && find Cargo.toml Cargo.lock pyproject.toml src python -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
    if [ "$(cat "$rstamp" 2>/dev/null)" != "$rwant" ] || ! python -c 'import kubelet_native' 2>/dev/null; then
        log "building kubelet_native (Rust, release)"
        python -m pip install -q --no-build-isolation --force-reinstall --no-deps "$REPO_ROOT/rust"
        echo "$rwant" >"$rstamp"
    fi
    pwant="$(cd "$REPO_ROOT" && find . -path ./.venv -prune -o -path ./rust -prune -o \( -name '*.pyx' -o -name '*.pxd' -o -name '*.proto' -o -name setup.py -o -name pyproject.toml -o -name gen_proto.py \) -print | sort | xargs sha256sum | sha256sum | cut -c1-16)"
    if [ "$(cat "$pstamp" 2>/dev/null)" != "$pwant" ] || ! python -c 'import kubelet.cmd' 2>/dev/null; then
        log "building kubelet (Cython modules, CRI stubs), editable"
        python "$REPO_ROOT/hack/gen_proto.py"
        python -m pip install -q --no-build-isolation --no-deps -e "$REPO_ROOT"
        echo "$pwant" >"$pstamp"
    fi
}

is_ci() { case "${CI:-}" in "" | 0 | false | FALSE | False | no) return 1 ;; *) return 0 ;; esac; }

# prepare_parts LOGDIR SCRIPT... runs each part's set-up script in the order
# given, its output in LOGDIR/<part>.log and "<exit code> <seconds> <started
# at>" (the last in this shell's $SECONDS) in LOGDIR/<part>.rc, written once
# the part is done: the .rc appearing is what wait_parts waits for.
prepare_parts() {
    local logdir="$1" prep name t0 code
    shift
    mkdir -p "$logdir"
    rm -f "$logdir"/*.log "$logdir"/*.rc
    for prep in "$@"; do
        [ -e "$prep" ] || continue
        name="$(basename "$prep" .sh)"
        t0=$SECONDS
        code=0
        bash "$prep" >"$logdir/$name.log" 2>&1 || code=$?
        echo "$code $((SECONDS - t0)) $t0" >"$logdir/$name.rc.tmp"
        mv "$logdir/$name.rc.tmp" "$logdir/$name.rc"
    done
}

# wait_parts LOGDIR PID NAME... returns once each part NAME has its .rc in
# LOGDIR, or once PID (the prepare_parts running them) has ended.
wait_parts() {
    local logdir="$1" pid="$2" name
    shift 2
    for name in "$@"; do
        while [ ! -e "$logdir/$name.rc" ] && kill -0 "$pid" 2>/dev/null; do sleep 2; done
    done
}

# report_parts LOGDIR [NAME...] says how each part's set-up went (those named,
# else every one with a .rc), with the tail of the log of each that failed. A
# named part without a .rc did not finish: a failure too. Under CI=true any
# failure returns 1: a real part that cannot be set up fails the run. Locally
# the tests that need it skip and say why.
report_parts() {
    local logdir="$1" name code took failed=()
    shift
    local names=("$@")
    if [ ${#names[@]} -eq 0 ]; then
        for name in "$logdir"/*.rc; do
            [ -e "$name" ] && names+=("$(basename "$name" .rc)")
        done
    fi
    for name in "${names[@]}"; do
        if [ ! -e "$logdir/$name.rc" ]; then
            failed+=("$name")
            log "part $name: set-up did not finish; last lines of $logdir/$name.log:"
            tail -n 40 "$logdir/$name.log" >&2 2>/dev/null || true
            continue
        fi
        read -r code took _ <"$logdir/$name.rc"
        if [ "$code" = 0 ]; then
            log "part $name ready (${took}s)"
        else
            failed+=("$name")
            log "part $name: set-up FAILED (exit $code, ${took}s); last lines of $logdir/$name.log:"
            tail -n 40 "$logdir/$name.log" >&2
        fi
    done
    [ ${#failed[@]} -eq 0 ] && return 0
    if is_ci; then
        log "CI=true: real parts that cannot be set up fail the run: ${failed[*]}"
        return 1
    fi
    log "WARNING: ${failed[*]} not set up; tests that need them will skip and say why"
}

# run_groups LOGDIR PID CMD GROUP... runs groups of tests as their parts get
# ready. GROUP is "name:part part ...": it waits (wait_parts) for those parts,
# reports them (report_parts), then runs `CMD NAME READY EARLIER`, READY the
# comma-separated parts of this and the earlier groups ("all" for the last
# group) and EARLIER those of the earlier groups only. Under CI=true a group
# whose parts failed is not run; every other group runs whatever the ones
# before did. Returns 1 if any group failed or did not run.
run_groups() {
    local logdir="$1" pid="$2" cmd="$3" group name part parts ready="" earlier="" failed=() n=0
    shift 3
    for group in "$@"; do
        n=$((n + 1))
        name="${group%%:*}"
        read -r -a parts <<<"${group#*:}"
        if declare -F step >/dev/null; then step "waiting for the parts of $name: ${parts[*]:-none}"; fi
        wait_parts "$logdir" "$pid" "${parts[@]}"
        earlier="$ready"
        for part in "${parts[@]}"; do ready="$ready${ready:+,}$part"; done
        if [ ${#parts[@]} -gt 0 ] && ! report_parts "$logdir" "${parts[@]}"; then
            log "tests of $name NOT RUN: their parts failed to set up (above)"
            failed+=("$name")
            continue
        fi
        [ "$n" -eq $# ] && ready=all
        "$cmd" "$name" "$ready" "$earlier" || failed+=("$name")
    done
    [ ${#failed[@]} -eq 0 ] && return 0
    log "FAILED: ${failed[*]}"
    return 1
}

# The -ldflags for a Kubernetes VERSION (v1.M.P): symbols and DWARF dropped, the
# version stamped the way the upstream build does, so the binaries report a
# real release.
k8s_ldflags() {
    local minor="${1#v1.}"
    minor="${minor%%.*}"
    echo "-s -w -X k8s.io/component-base/version.gitVersion=$1" \
        "-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
}

# build_e2e_suite VERSION OUT NAME PKG FILE MAIN: an upstream e2e suite built
# with `go test -c` in the pinned module's dir (OUT/src, written by
# build-control-plane.sh) from the test main MAIN, written to OUT/src/PKG/FILE,
# into OUT/bin/NAME; skipped when the binary there came from the same main
# (its stamp). Prints OUT/bin. For hack/parts/{csi,dra}/build-e2e.sh.
build_e2e_suite() {
    local version="$1" out="$2" name="$3" pkg="$4" file="$5" main="$6" stamp
    stamp="$(printf '%s' "$main" | sha256sum | cut -c1-16)"
    if [ -x "$out/bin/$name" ] && [ "$(cat "$out/bin/.$name.stamp" 2>/dev/null)" = "$stamp" ]; then
        echo "$out/bin"
        return 0
    fi
    command -v go >/dev/null || export PATH="/usr/local/go/bin:$PATH"
    (
        flock 9
        cd "$out/src"
        mkdir -p "$pkg"
        printf '%s\n' "$main" >"$pkg/$file"
        log "building $name ($pkg) $version"
        GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
        CGO_ENABLED=0 GOFLAGS=-mod=mod nice go test -c -trimpath -ldflags "$(k8s_ldflags "$version")" \
            -o "$out/bin/$name.tmp" "./$pkg"
        mv "$out/bin/$name.tmp" "$out/bin/$name"
        echo "$stamp" >"$out/bin/.$name.stamp"
    ) 9>"$out/.build.lock"
    echo "$out/bin"
}
