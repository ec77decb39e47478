#!/usr/bin/env bash
# workerd (Cloudflare's Workers runtime, npm `workerd`) for the worker-bundle tests
# (wasm_tests/test_worker_bundle.py): installed with npm into $APR_CACHE/workerd/VERSION,
# from npm's cache when it has the package. Prints the binary's path.
set -euo pipefail
cd "$(dirname "$0")/.."
export APR_CACHE="${APR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apr}"
VERSION="${APR_WORKERD_VERSION:-1.20261117.1}"
PREFIX="$APR_CACHE/workerd/$VERSION"
BIN="$PREFIX/node_modules/.bin/workerd"

if [ ! -x "$BIN" ] || ! "$BIN" --version >/dev/null 2>&1; then
  if ! command -v npm >/dev/null 2>&1; then
    if [ -n "${CI:-}" ] && [ "${CI}" != "false" ]; then
      echo "error: npm not found; CI needs it for workerd" >&2
      exit 1
    fi
    echo "note: npm not found; the workerd tests will be skipped" >&2
    exit 0
  fi
  mkdir -p "$PREFIX"
  # the package pins its platform binary (@cloudflare/workerd-linux-64) to the same version
  npm install --prefix "$PREFIX" --no-save --no-audit --no-fund --loglevel=error \
    --cache "$APR_CACHE/npm" --prefer-offline "workerd@$VERSION" >&2
fi
echo "$BIN"
