"""Load time and peak RSS of mmap loading against the usual loaders, each in a child process.

    .venv/bin/python bench/mmap_load.py [--model demo]

- GGUF (the real model): apr `open_mmap` + `Transformer` (zero-copy weights), apr's plain
  reader + `Transformer` (weights read into memory), llama.cpp's `Llama()` (mmap too).
- SafeTensors (the same model's weights dequantized to float16, written to a temp dir):
  apr `open_mmap` reading every tensor, `safetensors.numpy.load_file`, and `safe_open`
  reading every tensor.
"Touch" variants sum one byte per 4 KiB page of every tensor, i.e. fault every page in,
as a first forward pass would; llama.cpp's holds no arrays we can reach, so its "touch" is
that first forward pass (one token through every layer), which reads every weight page. Prints seconds and MB; not a test, no assertions.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, os.path.join(ROOT, "native")]

CHILD = r"""
import json, resource, sys, time
sys.path[:0] = {paths!r}
import numpy as np
kind, path, touch = sys.argv[1], sys.argv[2], sys.argv[3] == "1"

def pages(arrays):
    return int(sum(int(np.asarray(a).reshape(-1).view(np.uint8)[::4096].sum()) for a in arrays))

start = time.perf_counter()
if kind == "apr-mmap-model" or kind == "apr-read-model":
    from apr_native.engine import EngineOptions, load_engine
    model = load_engine(path, EngineOptions(mmap=kind == "apr-mmap-model"),
                        with_tokenizer=False).transformer
    held = [l.data for b in model.blocks for l in b.linears.values() if l is not None]
elif kind == "apr-mmap-tensors":
    from apr_native.mmap_source import open_mmap
    f = open_mmap(path)
    held = [f.read_raw(n).data for n in f.tensors]
elif kind == "llama.cpp":
    import llama_cpp
    llm = llama_cpp.Llama(path, n_ctx=64, verbose=False, n_threads=2)
    held = []
    if touch:
        llm.eval([llm.token_bos()])      # every weight page, read by one forward pass
elif kind == "safetensors-load_file":
    from safetensors.numpy import load_file
    held = list(load_file(path).values())
elif kind == "safetensors-safe_open":
    from safetensors import safe_open
    with safe_open(path, "np") as f:
        held = [f.get_tensor(n) for n in f.keys()]
loaded = time.perf_counter() - start
if touch:
    pages(held)
print(json.dumps({{"load_s": loaded, "total_s": time.perf_counter() - start,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}}))
"""

LAUNCHER = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"


def child(kind, path, touch):
    code = CHILD.format(paths=[ROOT, os.path.join(ROOT, "native")])
    done = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-c", code, kind,
                           path, "1" if touch else "0"], capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def f16_safetensors(gguf_path, out_path):
    import numpy as np
    from apr_core import dtypes
    from apr_core.formats.open import open_model
    from apr_core.formats.safetensors import write_safetensors
    from apr_core.quant import dequantize
    from apr_core.tensor import RawTensor
    f16 = dtypes.BY_NAME["F16"]
    with open_model(gguf_path) as model_file:
        tensors = [RawTensor(name, f16, info.shape, np.asarray(dequantize(
            model_file.read_raw(name).data, info.dtype, info.shape), np.float16).tobytes())
            for name, info in model_file.tensors.items()]
    write_safetensors(out_path, tensors, {})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="demo")
    args = parser.parse_args()
    from apr_native.real_models import locate
    gguf = str(locate(args.model))
    with tempfile.TemporaryDirectory() as tmp:
        st = os.path.join(tmp, "model.safetensors")
        f16_safetensors(gguf, st)
        for path, kinds in ((gguf, ["apr-mmap-model", "apr-read-model", "llama.cpp"]),
                            (st, ["apr-mmap-tensors", "safetensors-load_file",
                                  "safetensors-safe_open"])):
            print("{} ({:.1f} MB)".format(os.path.basename(path), os.path.getsize(path) / 1e6))
            for kind in kinds:
                for touch in (False, True):
                    r = child(kind, path, touch)
                    label = kind + (" +touch" if touch else "")
                    if "error" in r:
                        print("  {:32s} error: {}".format(label, r["error"]))
                    else:
                        print("  {:32s} load {:7.3f} s  total {:7.3f} s  peak RSS {:7.1f} MB"
                              .format(label, r["load_s"], r["total_s"], r["peak_rss"] / 1e6))


if __name__ == "__main__":
    main()
