#!/usr/bin/env bash
# Test a built similearn wheel in isolation, as a user gets it.
#
#   .ci/test_wheel.sh [WHEEL [PYTEST_ARGS...]]
#
# WHEEL defaults to the newest similearn-*.whl in <repo>/wheelhouse.  The wheel
# is installed with its [test] extra into a fresh virtual environment in a
# temporary directory, with no compiler on PATH (every cc/gcc/g++/c++/clang/zig
# is hidden, and that is checked), so nothing can be built from source;
# `similearn info`, `similearn selftest` and `similearn demo --quick` run; tests/ is copied to another
# temporary directory, outside the source tree, so `import similearn` can only
# find the installed wheel (this is checked), and `python -m pytest` runs there.
# Also checked: every file of python/similearn/ in the sources (as
# build_wheel.sh copies them; see SIMILEARN_WHEEL_SOURCE) and the compiled _core
# are in the wheel.
# Exits non-zero on any failure, including "no tests collected" (pytest exit 5).
# Environment: PYTHON (default python3), KEEP_TMP=1 keeps the temporary directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
SOURCE="${SIMILEARN_WHEEL_SOURCE:-worktree}"

if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi

if [[ $# -ge 1 ]]; then
    WHEEL="$1"
    shift
else
    WHEEL="$(ls -t "$ROOT"/wheelhouse/similearn-*.whl 2>/dev/null | head -n 1 || true)"
    if [[ -z "$WHEEL" ]]; then
        echo "test_wheel.sh: no wheel given and none in $ROOT/wheelhouse (run .ci/build_wheel.sh first)" >&2
        exit 2
    fi
fi
if [[ ! -f "$WHEEL" ]]; then
    echo "test_wheel.sh: no such wheel: $WHEEL" >&2
    exit 2
fi
WHEEL="$(cd "$(dirname "$WHEEL")" && pwd)/$(basename "$WHEEL")"
echo "test_wheel.sh: testing $WHEEL"

TMP="$(mktemp -d "${TMPDIR:-/tmp}/similearn-test.XXXXXX")"
if [[ "${KEEP_TMP:-0}" == 1 ]]; then
    echo "test_wheel.sh: keeping $TMP"
else
    trap 'rm -rf "$TMP"' EXIT
fi
VENV="$TMP/venv"
RUN="$TMP/run"
mkdir -p "$RUN"

# ---- 1. the wheel holds every package file of the sources ---------------------
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    if [[ "$SOURCE" == "HEAD" ]]; then
        git -C "$ROOT" ls-tree -r --name-only HEAD -- python/similearn >"$TMP/expected"
    else
        (cd "$ROOT" && git ls-files --cached --others --exclude-standard -- python/similearn \
            | while IFS= read -r f; do [[ -f "$f" ]] && printf '%s\n' "$f"; done) >"$TMP/expected"
    fi
else
    (cd "$ROOT" && find python/similearn -type f ! -name '*.pyc' ! -name '*.so' ! -name '*.pyd') >"$TMP/expected"
fi
"$PYTHON" - "$WHEEL" "$TMP/expected" <<'EOF'
import re, sys, zipfile
wheel, expected = sys.argv[1], sys.argv[2]
names = set(zipfile.ZipFile(wheel).namelist())
want = [l.strip() for l in open(expected) if l.strip()]
prefix = "python/"
missing = [p[len(prefix):] for p in want if p.startswith(prefix) and p[len(prefix):] not in names]
if not any(re.match(r"similearn/_core\..*\.(so|pyd)$", n) for n in names):
    missing.append("similearn/_core.<abi>.so (compiled extension)")
if missing:
    print("test_wheel.sh: the wheel is missing files:\n  " + "\n  ".join(missing), file=sys.stderr)
    sys.exit(1)
print(f"test_wheel.sh: wheel holds all {len(want)} package source files and the compiled _core")
EOF

# ---- 2. fresh virtual environment with the wheel and its [test] extra ----------
"$PYTHON" -m venv "$VENV"
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV CC CXX
# PATH without compilers: one directory of links to every other command on PATH
NOCC="$TMP/path"
mkdir -p "$NOCC"
IFS=: read -r -a path_dirs <<<"$PATH"
for d in "${path_dirs[@]}"; do
    [[ -d "$d" ]] || continue
    for f in "$d"/*; do
        b="$(basename "$f")"
        [[ -x "$f" && ! -d "$f" && ! -e "$NOCC/$b" ]] || continue
        case "$b" in
            cc|c++|cpp|gcc|g++|gcc-*|g++-*|*-gcc|*-g++|*-gcc-*|*-g++-*|clang|clang++|clang-*|zig|ld|ld.*|as|gfortran*) ;;
            *) ln -s "$f" "$NOCC/$b" ;;
        esac
    done
done
export VIRTUAL_ENV="$VENV"
export PATH="$VENV/bin:$NOCC"
for c in cc c++ gcc g++ clang zig; do
    if command -v "$c" >/dev/null 2>&1; then
        echo "test_wheel.sh: a compiler is still on PATH: $(command -v "$c")" >&2
        exit 1
    fi
done
echo "test_wheel.sh: no compiler on PATH"
VPY="$VENV/bin/python"
"$VPY" -m pip install "$WHEEL[test]"

# ---- 3. tests outside the source tree ------------------------------------------
cp -R "$ROOT/tests" "$RUN/tests"
find "$RUN/tests" -name __pycache__ -prune -exec rm -rf {} +
# pytest settings (markers, testpaths, addopts) live in pyproject.toml; the copy
# carries no package sources (those are under python/, which is not copied).
cp "$ROOT/pyproject.toml" "$RUN/pyproject.toml"
cd "$RUN"

"$VPY" - "$VENV" <<'EOF'
import os, sys
venv = os.path.realpath(sys.argv[1])
import similearn, similearn._core
for mod in (similearn, similearn._core):
    f = os.path.realpath(mod.__file__)
    if not f.startswith(venv + os.sep):
        sys.exit(f"test_wheel.sh: {mod.__name__} was imported from {f}, not from the virtual environment {venv}")
print(f"test_wheel.sh: similearn {similearn.__version__} imported from {os.path.dirname(similearn.__file__)}")
EOF
echo "---- similearn info ----"
"$VENV/bin/similearn" info
echo "---- similearn selftest ----"
"$VENV/bin/similearn" selftest   # the reference digests: exits 1 if this build answers differently
echo "---- similearn demo --quick ----"
"$VENV/bin/similearn" demo --quick

set +e
"$VPY" -m pytest -p no:cacheprovider "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
    echo "test_wheel.sh: pytest collected no tests (exit 5): failing" >&2
    exit 1
elif [[ $rc -ne 0 ]]; then
    echo "test_wheel.sh: pytest failed (exit $rc)" >&2
    exit "$rc"
fi
echo "test_wheel.sh: OK ($(basename "$WHEEL"))"
