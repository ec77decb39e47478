"""Run one planned kernel on the native WebGPU device with numpy arrays in and out.

    out = run_kernel(device, "norm", "norm", values, {"x": x, "h": np.zeros(...)},
                     ["step", "x", ...], groups, step_words)

The uniform values go through `apr_core.gpu.plan.Plan.dispatch` (the same packing and
WGSL the real plan uses); every named array becomes a storage buffer, and each is read
back after the single submission.
"""
import os
import tempfile

import numpy as np

from apr_core.gpu.plan import Plan
from apr_core.gpu.step import Capacity, pack_step

os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="apr-xdg-"))


def device():
    from apr_native.gpu.wgpu_device import open_device
    return open_device()


def step_words(t, positions=None, slots=None, tables=None, block=1, out_rows=None,
               ropes=(None, None)):
    """The step buffer of `t` rows (positions 0.. and one block per row by default)."""
    positions = np.arange(t) if positions is None else np.asarray(positions)
    slots = positions if slots is None else np.asarray(slots)
    tables = np.zeros((t, 1), np.int32) if tables is None else np.asarray(tables)
    out_rows = list(range(t)) if out_rows is None else out_rows
    return pack_step(np.zeros(t, np.int64), positions, slots, tables, block, out_rows, ropes)


def run_kernel(dev, kind, key, values, arrays, bind_names, groups, words):
    """Dispatch `kind` (pipeline `key`) once; returns {name: array after the run}."""
    plan = Plan(Capacity(1, 1, 1), dev.limits)
    plan.dispatch(kind, key, values, [(name, 0, 0) for name in bind_names], groups)
    plan.finish(0)
    params = plan.uploads["params"]
    handles = {"params": dev.buffer(len(params), "params"),
               "step": dev.buffer(words.nbytes, "data")}
    dev.write(handles["params"], 0, params)
    dev.write(handles["step"], 0, words)
    for name, array in arrays.items():
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        padded = np.zeros(max(16, -(-data.size // 4) * 4), np.uint8)
        padded[:data.size] = data
        handles[name] = dev.buffer(padded.size, "data")
        dev.write(handles[name], 0, padded)
    handles.setdefault("dummy", dev.buffer(16, "data"))
    pipeline = dev.pipeline(key, plan.pipelines[key])
    dispatch = plan.dispatches[0]
    entries = [(b.binding, handles[b.buffer], b.offset, b.size) for b in dispatch.binds]
    group = dev.bind_group(pipeline, entries)
    out = {}
    for name, array in arrays.items():
        size = np.asarray(array).nbytes
        readback = dev.buffer(max(16, -(-size // 4) * 4), "readback")
        ops = [("dispatch", pipeline, group, groups)] if not out else []
        ops.append(("copy", handles[name], 0, readback, 0, -(-size // 4) * 4))
        data = dev.run(ops, readback, size)
        out[name] = np.frombuffer(data, np.asarray(array).dtype).reshape(np.shape(array))
    return out
