#!/usr/bin/env bash
# llama.cpp's own `llama-server`, the serving peer of bench/server_load.py: built from the
# llama.cpp sources vendored in the llama-cpp-python sdist (the same version setup.sh pins
# for the wheel), static, cached as $APR_CACHE/bin/llama-server-<version> and reused while
# it runs. Prints the binary's path on stdout, last; the build's chatter goes to stderr.
# About 4 minutes on 2 cores the first time.
#
#   scripts/build_llama_server.sh            # build unless cached, print the path
#   scripts/build_llama_server.sh --cached   # print the path if cached, else exit 1
set -euo pipefail
cd "$(dirname "$0")/.."
export APR_CACHE="${APR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apr}"
source scripts/llama_build.sh
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
BIN="$APR_CACHE/bin/llama-server-$LLAMA_BUILD_TAG"

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "no llama-server $LLAMA_VERSION in $APR_CACHE/bin: run scripts/build_llama_server.sh" >&2
  exit 1
fi

mkdir -p "$APR_CACHE/bin"
WORK="$(mktemp -d)"
PARTIAL="$APR_CACHE/bin/.llama-server-$LLAMA_BUILD_TAG.$$"
trap 'rm -rf "$WORK" "$PARTIAL"' EXIT
echo "building llama-server from llama-cpp-python $LLAMA_VERSION's llama.cpp (cached as $BIN)..." >&2
SRC="$(llama_sources "$WORK")"
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON \
      -DCMAKE_C_FLAGS="$LLAMA_CPU_FLAGS" -DCMAKE_CXX_FLAGS="$LLAMA_CPU_FLAGS" >&2
cmake --build "$SRC/build" --target llama-server -j "$(nproc)" >&2
"$SRC/build/bin/llama-server" --version >&2
# Copied next to its final name, then renamed: a half-written binary is never "cached".
cp "$SRC/build/bin/llama-server" "$PARTIAL"
mv "$PARTIAL" "$BIN"
echo "$BIN"
