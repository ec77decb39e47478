# Sourced by setup.sh (the llama-cpp-python wheel), build_llama_server.sh (llama-server) and
# fetch_tokenizer_vectors.sh (the sdist):
# THE llama.cpp version and build flags of the oracle and the serving peer, and the cache
# key they are stored under.
LLAMA_VERSION=0.3.36
# Native code for this CPU, but without AMX: on machines that report AMX tiles without the
# kernel granting them to the process, ggml's AMX matmul (ggml_backend_amx_mul_mat)
# segfaults on the first decode. AVX-512/VNNI stay on.
LLAMA_CPU_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
LLAMA_BUILD_TAG="$LLAMA_VERSION-noamx"

# llama_sources DIR: the llama.cpp sources vendored in the pinned sdist (downloaded once
# into $APR_CACHE/sdist, shared with fetch_tokenizer_vectors.sh), extracted under DIR;
# prints their folder. Needs APR_CACHE and PY.
llama_sources() {
  local sdist="$APR_CACHE/sdist/llama_cpp_python-$LLAMA_VERSION.tar.gz"
  if [ ! -f "$sdist" ]; then
    mkdir -p "$APR_CACHE/sdist"
    "$PY" -m pip download -q --no-deps --no-binary :all: -d "$APR_CACHE/sdist" \
      "llama-cpp-python==$LLAMA_VERSION" >&2
  fi
  tar -xzf "$sdist" -C "$1" "llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
  echo "$1/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
}
