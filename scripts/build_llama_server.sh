#!/usr/bin/env bash
# llama.cpp's own `llama-server`, the serving peer of bench/server_load.py: built from the
# llama.cpp sources vendored in the llama-cpp-python sdist (the same version setup.sh pins
# for the wheel), static, cached under $APR_CACHE/bin and reused while it runs. Prints the
# binary's path last. About 4 minutes on 2 cores the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
export APR_CACHE="${APR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apr}"
LLAMA_VERSION=0.3.36
BIN="$APR_CACHE/bin/llama-server-$LLAMA_VERSION"
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi
PYTHON=.venv/bin/python
[ -x "$PYTHON" ] || PYTHON=python3
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo "building llama-server from llama-cpp-python $LLAMA_VERSION's sources (cached in $APR_CACHE/bin)..." >&2
"$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$WORK" "llama-cpp-python==$LLAMA_VERSION" >&2
tar -xzf "$WORK/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$WORK"
SRC="$WORK/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DGGML_NATIVE=ON >&2
cmake --build "$SRC/build" --target llama-server -j "$(nproc)" >&2
mkdir -p "$APR_CACHE/bin"
cp "$SRC/build/bin/llama-server" "$BIN.tmp.$$"
mv "$BIN.tmp.$$" "$BIN"                 # atomic: a half-copied binary is never "cached"
echo "$BIN"
