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
