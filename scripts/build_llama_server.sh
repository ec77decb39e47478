#!/usr/bin/env bash
# llama.cpp's own `llama-server`, the serving peer of bench/server_load.py: built from the
# llama.cpp sources vendored in the llama-cpp-python sdist (the same version setup.sh pins
# for the wheel), static, cached as $APR_CACHE/bin/llama-server-<version> and reused while
# it runs. Prints the binary's path on stdout, last; the build's chatter goes to stderr.
# About 4 minutes on 2 cores the first time. An instruction level (apr_native.isa: generic,
# avx2, avx512, avx512vnni) builds it with that level's cmake switches instead of this
# CPU's own (GGML_NATIVE), cached as llama-server-<version>-<level>, so that
# `bench/server_load.py --isa avx2` serves both sides at the same level.
#
#   scripts/build_llama_server.sh                 # build unless cached, print the path
#   scripts/build_llama_server.sh --cached        # print the path if cached, else exit 1
#   scripts/build_llama_server.sh avx2 [--cached] # the same, for one instruction level
set -euo pipefail
cd "$(dirname "$0")/.."
export APR_CACHE="${APR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apr}"
source scripts/llama_build.sh
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
LEVEL=native
if [ -n "${1:-}" ] && [ "$1" != "--cached" ]; then
  LEVEL="$1"
  shift
fi
if [ "$LEVEL" = native ]; then
  BIN="$APR_CACHE/bin/llama-server-$LLAMA_BUILD_TAG"
  CPU_SWITCHES="-DGGML_NATIVE=ON"
else
  BIN="$APR_CACHE/bin/llama-server-$LLAMA_VERSION-$LEVEL"
  # the level's cmake switches: apr_native.isa's table (one table for apr and its peers)
  CPU_SWITCHES="$(PYTHONPATH=native "$PY" -c "import sys; from apr_native import isa; \
print(' '.join(isa.LEVELS[sys.argv[1]].llama_cmake))" "$LEVEL")"
fi

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "no llama-server $LLAMA_VERSION ($LEVEL) in $APR_CACHE/bin: run scripts/build_llama_server.sh $LEVEL" >&2
  exit 1
fi

mkdir -p "$APR_CACHE/bin"
WORK="$(mktemp -d)"
PARTIAL="$APR_CACHE/bin/.$(basename "$BIN").$$"
trap 'rm -rf "$WORK" "$PARTIAL"' EXIT
echo "building llama-server ($LEVEL: $CPU_SWITCHES) from llama-cpp-python $LLAMA_VERSION's llama.cpp (cached as $BIN)..." >&2
SRC="$(llama_sources "$WORK")"
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON $CPU_SWITCHES \
      -DCMAKE_C_FLAGS="$LLAMA_CPU_FLAGS" -DCMAKE_CXX_FLAGS="$LLAMA_CPU_FLAGS" >&2
cmake --build "$SRC/build" --target llama-server -j "$(nproc)" >&2
"$SRC/build/bin/llama-server" --version >&2
# Copied next to its final name, then renamed: a half-written binary is never "cached".
cp "$SRC/build/bin/llama-server" "$PARTIAL"
mv "$PARTIAL" "$BIN"
echo "$BIN"
