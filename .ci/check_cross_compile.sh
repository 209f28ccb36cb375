#!/usr/bin/env bash
# Compile-only portability check of the C++ kernels with zig's clang for other
# platforms than the host: every csrc/*.cpp that does not include Python or
# pybind11 (no `#include <pybind11/...>`, <Python.h> or "bind.hpp"; found by
# grepping, not by name) is compiled, without linking, for each target:
#
#   .ci/check_cross_compile.sh [--list] [-j N] [FILE.cpp...]
#
# Targets (SIMILEARN_CROSS_TARGETS, space separated): x86_64-windows-gnu
# aarch64-macos aarch64-linux-gnu.  Flags: -std=c++17 -O2 -Wall -Icsrc, and
# `-c` to a scratch object: code generation included, so errors such as
# intrinsics used without their target feature show up (zig 0.17.1's
# -fsyntax-only also reports a spurious "failed to rename" error: not used).
# --list prints the selected sources (relative to the repository) and exits
# (no compiler needed); FILE arguments restrict the check to those sources.
# -j N runs N compilations at a time (default 1).
# One line per failing (target, file) with the compiler's first error, then a
# summary; the exit status is 1 if anything failed, 2 on a usage error.
# The compiler: the `ziglang` package (ZIGLANG_VERSION, default 0.17.1) in a
# private venv cached in $SIMILEARN_ZIG_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/similearn-zig), created on first use; zig's own
# cache lives there too, so repeated runs are fast.  Environment: PYTHON
# (default python3), KEEP_LOGS=1 keeps the full compiler output.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ME="check_cross_compile.sh"
export LC_ALL=C  # the same source order everywhere
PYTHON="${PYTHON:-python3}"
ZIGLANG_VERSION="${ZIGLANG_VERSION:-0.17.1}"
CACHE="${SIMILEARN_ZIG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/similearn-zig}"
TARGETS="${SIMILEARN_CROSS_TARGETS:-x86_64-windows-gnu aarch64-macos aarch64-linux-gnu}"
# a source that includes one of these is a Python binding: not compiled here
BINDING_INCLUDE='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](pybind11/|Python\.h|bind\.hpp)'

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
usage_error() {
    echo "$ME: $*" >&2
    echo "usage: .ci/check_cross_compile.sh [--list] [-j N] [FILE.cpp...]  (--help for more)" >&2
    exit 2
}

# ---- internal: one compilation (run through xargs) ---------------------------------
if [[ "${1:-}" == --compile-one ]]; then
    # --compile-one ZIG LOGDIR TARGET FILE
    zig="$2" logdir="$3" target="$4" file="$5"
    log="$logdir/$target--$(basename "$file").log"
    obj="$logdir/$target--$(basename "$file").o"
    if "$zig" c++ -target "$target" -std=c++17 -O2 -Wall -I"$ROOT/csrc" -c -o "$obj" "$ROOT/$file" >"$log" 2>&1; then
        echo "ok $target $file" >"$log.status"
    else
        echo "FAIL $target $file" >"$log.status"
    fi
    rm -f "$obj"
    exit 0
fi

LIST=0
JOBS=1
FILES=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --list) LIST=1; shift ;;
        -j) [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || usage_error "-j needs a positive number"
            JOBS="$2"; shift 2 ;;
        -j*) JOBS="${1#-j}"; [[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || usage_error "-j needs a positive number"; shift ;;
        -*) usage_error "unknown option '$1'" ;;
        *) FILES+=("$1"); shift ;;
    esac
done

# ---- the sources: csrc/*.cpp that include neither Python nor pybind11 -------------------
cd "$ROOT"
SELECTED=()
for f in csrc/*.cpp; do
    [[ -f "$f" ]] || continue
    grep -Eq "$BINDING_INCLUDE" "$f" && continue
    SELECTED+=("$f")
done
if [[ ${#FILES[@]} -gt 0 ]]; then
    wanted=()
    for f in "${FILES[@]}"; do
        rel="csrc/$(basename "$f")"
        found=0
        for s in "${SELECTED[@]}"; do [[ "$s" == "$rel" ]] && found=1; done
        [[ $found == 1 ]] || usage_error "$f is not one of the selected sources (see --list)"
        wanted+=("$rel")
    done
    SELECTED=("${wanted[@]}")
fi
if [[ ${#SELECTED[@]} -eq 0 ]]; then
    echo "$ME: no C++ sources selected in $ROOT/csrc" >&2
    exit 1
fi
if [[ "$LIST" == 1 ]]; then
    printf '%s\n' "${SELECTED[@]}"
    exit 0
fi

# ---- the compiler: ziglang in a cached private venv ------------------------------------
VENV="$CACHE/venv-ziglang-$ZIGLANG_VERSION"
if ! "$VENV/bin/python" -c "import ziglang" >/dev/null 2>&1; then
    echo "$ME: installing ziglang==$ZIGLANG_VERSION into $VENV (once)"
    rm -rf "$VENV"
    mkdir -p "$CACHE"
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet "ziglang==$ZIGLANG_VERSION"
fi
ZIG="$("$VENV/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
export ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-$CACHE/zig-cache}"
export ZIG_LOCAL_CACHE_DIR="${ZIG_LOCAL_CACHE_DIR:-$CACHE/zig-local-cache}"

LOGS="$(mktemp -d "${TMPDIR:-/tmp}/similearn-cross.XXXXXX")"
if [[ "${KEEP_LOGS:-0}" == 1 ]]; then
    echo "$ME: keeping the compiler output in $LOGS"
else
    trap 'rm -rf "$LOGS"' EXIT
fi
read -r -a target_list <<<"$TARGETS"
echo "$ME: zig $("$ZIG" version); ${#SELECTED[@]} sources x ${#target_list[@]} targets (${target_list[*]}); -j $JOBS"
start=$SECONDS
for t in "${target_list[@]}"; do
    for f in "${SELECTED[@]}"; do
        printf '%s\0%s\0' "$t" "$f"
    done
done | xargs -0 -n 2 -P "$JOBS" "$BASH" "${BASH_SOURCE[0]}" --compile-one "$ZIG" "$LOGS"

# ---- report ------------------------------------------------------------------------------
fails=0
ok=0
warned=0
for t in "${target_list[@]}"; do
    for f in "${SELECTED[@]}"; do
        log="$LOGS/$t--$(basename "$f").log"
        status="$(cat "$log.status" 2>/dev/null || echo "FAIL $t $f")"
        if [[ "$status" == ok* ]]; then
            ok=$((ok + 1))
            if grep -q "warning:" "$log"; then
                warned=$((warned + 1))
                echo "WARN $t $f: $(grep -m 1 "warning:" "$log" | sed "s|$ROOT/||g")"
            fi
        else
            fails=$((fails + 1))
            first="$(grep -m 1 "error:" "$log" | sed "s|$ROOT/||g" || true)"
            echo "FAIL $t $f: ${first:-$(head -n 1 "$log")}"
        fi
    done
done
total=$((ok + fails))
echo "$ME: $ok of $total compilations ok, $fails failed, $warned with warnings ($((SECONDS - start)) s)"
[[ $fails -eq 0 ]]
