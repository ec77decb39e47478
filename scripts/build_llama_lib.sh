#!/usr/bin/env bash
# llama.cpp's shared libraries built for one instruction level (apr_native.isa: generic,
# avx2, avx512, avx512vnni), so that `apr bench --isa LEVEL --compare llama.cpp` and
# bench/decode.py measure apr and llama.cpp at the same level on any host: an AVX-512
# machine measures what an AVX2 user gets. The installed llama-cpp-python loads them
# through LLAMA_CPP_LIB_PATH. Built from the llama.cpp sources vendored in the
# llama-cpp-python sdist (the version setup.sh pins), cached as
# $APR_CACHE/llama-lib/<version>-<level>/ and reused. Prints that folder on stdout, last.
# About 5 minutes on 2 cores the first time.
#
#   scripts/build_llama_lib.sh avx2            # build unless cached, print the folder
#   scripts/build_llama_lib.sh avx2 --cached   # print the folder if cached, else exit 1
set -euo pipefail
cd "$(dirname "$0")/.."
export APR_CACHE="${APR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apr}"
source scripts/llama_build.sh
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
LEVEL="${1:?usage: build_llama_lib.sh LEVEL [--cached]}"
# the level's cmake switches: apr_native.isa's table (one table for apr and its peer)
FLAGS="$(PYTHONPATH=native "$PY" -c "import sys; from apr_native import isa; \
print(' '.join(isa.LEVELS[sys.argv[1]].llama_cmake))" "$LEVEL")"
DEST="$APR_CACHE/llama-lib/$LLAMA_VERSION-$LEVEL"

if ls "$DEST"/libllama.so >/dev/null 2>&1; then
  echo "$DEST"
  exit 0
fi
if [ "${2:-}" = "--cached" ]; then
  echo "no llama.cpp $LLAMA_VERSION built for $LEVEL: run scripts/build_llama_lib.sh $LEVEL" >&2
  exit 1
fi

WORK="$(mktemp -d)"
PARTIAL="$DEST.partial.$$"
trap 'rm -rf "$WORK" "$PARTIAL"' EXIT
echo "building llama.cpp's libraries for $LEVEL ($FLAGS), cached as $DEST ..." >&2
SRC="$(llama_sources "$WORK")"
# shellcheck disable=SC2086
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF \
      -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' \
      $FLAGS >&2
cmake --build "$SRC/build" --target llama -j "$(nproc)" >&2
mkdir -p "$PARTIAL"
find "$SRC/build" -name 'lib*.so*' -exec cp -P {} "$PARTIAL/" \;
# a folder renamed into place: a half-copied build is never "cached"
rm -rf "$DEST"
mv "$PARTIAL" "$DEST"
echo "$DEST"
