"""Child process of test_isa_levels.py: what apr's numba kernels compute at the
instruction level $APR_ISA names, as one JSON line.

    APR_ISA=avx2 python tests/native/isa_probe.py MODEL_PATH...

- "matvec": per block type, the bytes of a 9 x 512 weight's products with 1 and 3 tokens
  (the one-token dots and the multi-token rows), as hex digests and as lists of floats;
- "greedy": per model path, 16 greedy tokens after its chat prompt and the bytes of
  their logits (a digest) on numba's kernels over the mmap loader (as `apr run`).
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [ROOT, os.path.join(ROOT, "native")]

import numpy as np  # noqa: E402

PROMPT = "Write a Python function that checks whether a number is prime."
STEPS = 16


def matvecs():
    from apr_core import dtypes
    from apr_core.quant.api import quantize
    from apr_native.kernels import cpu
    out = {}
    shape = (9, 512)
    for name in cpu.SUPPORTED:
        dtype = dtypes.BY_NAME[name]
        weights = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        data = np.frombuffer(quantize(weights, dtype), np.uint8)
        for tokens in (1, 3):
            x = np.random.default_rng(2).standard_normal((tokens, shape[1])).astype(np.float32)
            y = cpu.numba_matmul(data, dtype, shape, x, 1 << 20)       # [T, 9]
            out["{}x{}".format(name, tokens)] = {
                "digest": hashlib.sha256(y.tobytes()).hexdigest(),
                "values": y.astype(np.float64).ravel().tolist()}
    return out


def greedy(path):
    from apr_core.runtime.text_model import TextModel
    from apr_native import backends
    from apr_native.mmap_source import open_mmap
    kernels = backends.select("numba")
    model = TextModel.load(path, opener=open_mmap, kernels=kernels)
    ids = model.prompt_ids(PROMPT, chat=True)
    transformer = model.transformer
    cache = transformer.new_cache(len(ids) + STEPS)
    row = transformer.forward(ids, cache, last_only=True)[-1]
    digest, tokens = hashlib.sha256(), []
    for _ in range(STEPS):
        digest.update(np.ascontiguousarray(row, np.float32).tobytes())
        tokens.append(int(row.argmax()))
        row = transformer.forward([tokens[-1]], cache)[-1]
    return {"tokens": tokens, "digest": digest.hexdigest()}


def main(paths):
    from apr_native import isa
    level = isa.requested()
    result = {"level": level, "matvec": matvecs(),
              "greedy": {path: greedy(path) for path in paths}}
    from numba.core import config                      # as the kernels' import set it
    result["numba_cpu"] = [config.CPU_NAME, config.CPU_FEATURES]
    from apr_native.kernels.vector import llvm_ir
    result["paths"] = {"pmaddwd": llvm_ir._PMADDWD is not None, "f16c": bool(llvm_ir._F16C)}
    sys.stdout.write("ISA_PROBE " + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
