#!/usr/bin/env bash
# Browser shell dependencies (called by scripts/setup.sh): the npm packages pinned in
# web/package-lock.json (Pyodide 314, Pyodide 0.17 full, hash-wasm, wllama, and whisper.cpp's
# wasm build @transcribe/shout for bench/whisper.py) and the msgpack wheel PyPI serves for
# Pyodide 314. Downloads are cached under $APR_CACHE, so a clean clone
# in CI only re-extracts them.
set -euo pipefail
cd "$(dirname "$0")/.."
export APR_CACHE="${APR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apr}"

if ! command -v npm >/dev/null 2>&1; then
  if [ -n "${CI:-}" ] && [ "${CI}" != "false" ]; then
    echo "error: npm not found; CI needs it for the browser shell and wasm_tests" >&2
    exit 1
  fi
  echo "note: npm not found; the browser shell and wasm_tests will be skipped"
  exit 0
fi
# Reinstall only when the lockfile changed since the last install (a copy is kept as a stamp).
if ! cmp -s web/package-lock.json web/node_modules/.apr-installed-lock.json; then
  (cd web && npm ci --cache "$APR_CACHE/npm" --prefer-offline --no-audit --no-fund --loglevel=error)
  cp web/package-lock.json web/node_modules/.apr-installed-lock.json
fi

WHEELS="$APR_CACHE/web-wheels"
if ! ls "$WHEELS"/msgpack-*pyemscripten*.whl >/dev/null 2>&1; then
  mkdir -p "$WHEELS"
  .venv/bin/pip download -q --no-deps --only-binary=:all: --platform pyemscripten_2026_0_wasm32 \
    --python-version 3.14 --implementation cp --abi cp314 -d "$WHEELS" msgpack \
    || echo "note: no msgpack wheel for Pyodide 314 (optional)"
fi
