"""GpuForward: a Transformer's forward steps on a device, one submission and one read-back
per step. Device-independent: the device is any object with these methods (the native
one is `apr_native.gpu.wgpu_device.WgpuDevice`; the browser's wraps `navigator.gpu`):

    limits                                   -> plan.Limits
    buffer(size, kind)                       -> handle     (kind: weight data step params
                                                            readback kv)
    write(handle, offset, data)                             (queued upload, no submission)
    pipeline(key, wgsl)                      -> handle
    bind_group(pipeline, [(binding, handle, offset, size)]) -> handle   (size 0: whole)
    run(ops, readback_handle, nbytes)        -> bytes      ONE submission of `ops` in
        order: ("dispatch", pipeline, group, (x, y, z)) | ("copy", src, src_off, dst,
        dst_off, n) | ("clear", buf, off, n); then ONE map of the readback buffer
    submissions, readbacks                   counters

    gpu = GpuForward(model, device)
    logits = gpu.forward_rows(ids, cache, rows)     # [len(rows), n_vocab] float32
    ids = gpu.forward_argmax(ids, cache, rows)      # [len(rows)] int64, greedy on device
"""
from __future__ import annotations

import weakref
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ..errors import AprError, ErrorCode
from .kv import DeviceKV
from .plan import Plan
from .plan_layers import build_plan
from .step import ROPE_KINDS, Capacity, pack_step

FIRST_CAPACITY = Capacity(rows=8, out_rows=1, table_width=4)


class GpuForward:
    """The whole forward pass of `model` on `device` (weights uploaded on construction)."""

    def __init__(self, model: Any, device: Any,
                 capacity: Capacity = FIRST_CAPACITY) -> None:
        self.model = model
        self.device = device
        self.limits = device.limits
        self.plan: Optional[Plan] = None
        self.handles: Dict[str, Any] = {}
        self.pipelines: Dict[str, Any] = {}
        self.groups: Dict[Any, Any] = {}
        self.generation = 0
        self.kv: "weakref.WeakKeyDictionary[Any, DeviceKV]" = weakref.WeakKeyDictionary()
        self.steps = 0
        self._build(capacity)

    # ------------------------------------------------------------------ counters

    @property
    def submissions(self) -> int:
        return self.device.submissions

    @property
    def readbacks(self) -> int:
        return self.device.readbacks

    # ------------------------------------------------------------------ the plan

    def _build(self, capacity: Capacity) -> None:
        """Build the plan for `capacity`; create what changed (weights are uploaded once:
        their buffers keep their names and sizes)."""
        plan = build_plan(self.model, capacity, self.limits)
        old = self.plan.buffers if self.plan is not None else {}
        for name, spec in plan.buffers.items():
            if old.get(name) != spec or name not in self.handles:
                self.handles[name] = self.device.buffer(spec.size, spec.kind)
                if name in plan.uploads:
                    _upload(self.device, self.handles[name], plan.uploads[name])
            elif name == "params":
                self.device.write(self.handles[name], 0, plan.uploads[name])
        for key, wgsl in plan.pipelines.items():
            if key not in self.pipelines:
                self.pipelines[key] = self.device.pipeline(key, wgsl)
        plan.uploads = {}          # the weights are on the device now
        self.plan = plan
        self.groups = {}
        self.generation += 1

    def _kv_for(self, cache: Any) -> DeviceKV:
        owner = getattr(cache, "pool", cache)
        kv = self.kv.get(owner)
        if kv is None:
            cfg = self.model.config
            kv = DeviceKV(self.device, cfg.n_layers, cfg.kv_dim * 4,
                          self.limits.max_binding, owner)
            self.kv[owner] = kv
        return kv

    def _group(self, index: int, kv: DeviceKV) -> Any:
        dispatch = self.plan.dispatches[index]
        key = (index, id(kv), kv.generation) if dispatch.kv_layers else index
        group = self.groups.get(key)
        if group is None:
            entries = []
            for bind in dispatch.binds:
                handle = kv.buffers[bind.buffer] if bind.buffer[:2] in ("k:", "v:") \
                    else self.handles[bind.buffer]
                entries.append((bind.binding, handle, bind.offset, bind.size))
            group = self.device.bind_group(self.pipelines[dispatch.pipeline], entries)
            self.groups[key] = group
        return group

    # ------------------------------------------------------------------ one step

    def forward_rows(self, token_ids: Sequence[int], cache: Any, rows: Sequence[int]
                     ) -> np.ndarray:
        """Logits `[len(rows), n_vocab]` of rows `rows` of the step `token_ids` run after
        what `cache` (a KVCache or a batch step's BatchKV) holds."""
        return self._step(token_ids, cache, rows, argmax=False)

    def forward_argmax(self, token_ids: Sequence[int], cache: Any, rows: Sequence[int]
                       ) -> np.ndarray:
        """The greedy next id `[len(rows)]` of each row: only the ids come back."""
        return self._step(token_ids, cache, rows, argmax=True)

    def _step(self, token_ids: Sequence[int], cache: Any, rows: Sequence[int],
              argmax: bool) -> np.ndarray:
        cfg = self.model.config
        ids = np.asarray(token_ids, np.int64).reshape(-1)
        if ids.size == 0:
            raise AprError(ErrorCode.ARGUMENT, "forward needs at least one token")
        if ids.min() < 0 or ids.max() >= cfg.n_vocab:
            raise AprError(ErrorCode.ARGUMENT, "token id outside the vocabulary",
                           n_vocab=cfg.n_vocab, min=int(ids.min()), max=int(ids.max()))
        if cache is None:
            cache = self.model.new_cache(ids.size)
        t = ids.size
        cache.check_room(t)
        positions = cache.positions(t)                                  # [T] int64
        slots, tables, block = cache.kernel_view(t)                     # [T], [T, W]
        out_rows = [int(r) for r in rows]
        if not out_rows or min(out_rows) < 0 or max(out_rows) >= t:
            raise AprError(ErrorCode.ARGUMENT, "logit rows outside the step", rows=t)
        if not self.plan.capacity.holds(t, len(out_rows), tables.shape[1]):
            self._build(self.plan.capacity.grown(t, len(out_rows), tables.shape[1]))
        if argmax and len(self.plan.logit_chunks) != 1:
            raise AprError(ErrorCode.UNSUPPORTED, "argmax on the device needs the logits "
                           "in one binding", rows=len(out_rows))
        kv = self._kv_for(cache)
        kv.ensure(kv.needed_slots(positions, slots, tables, block))
        ropes = [self.model.ropes[kind].tables(positions) if kind in self.model.ropes
                 else None for kind in ROPE_KINDS]                      # (cos, sin) [T, d/2]
        words = pack_step(ids, positions, slots, tables, block, out_rows, ropes)
        self.device.write(self.handles["step"], 0, words)
        ops: List[Any] = kv.take_pending()
        r = len(out_rows)
        for index, dispatch in enumerate(self.plan.dispatches):
            if dispatch.pipeline == "argmax" and not argmax:
                continue
            ops.append(("dispatch", self.pipelines[dispatch.pipeline],
                        self._group(index, kv), dispatch.workgroups(t, r)))
        vocab = cfg.n_vocab
        readback = self.handles["readback"]
        if argmax:
            ops.append(("copy", self.handles["ids"], 0, readback, 0, r * 4))
            data = self.device.run(ops, readback, r * 4)
        else:
            for name, first, count in self.plan.logit_chunks:
                n = min(count, r - first)
                if n > 0:
                    ops.append(("copy", self.handles[name], 0, readback, first * vocab * 4,
                                n * vocab * 4))
            data = self.device.run(ops, readback, r * vocab * 4)
        cache.advance(t)
        self.steps += 1
        if argmax:
            return np.frombuffer(data, np.uint32, r).astype(np.int64)
        return np.frombuffer(data, np.float32, r * vocab).reshape(r, vocab).copy()


def _upload(device: Any, handle: Any, data: Any) -> None:
    """Write `data` (bytes or an array, e.g. a view of the mapped file) as whole words
    (WebGPU writes multiples of 4 bytes): the aligned bulk as is, the tail padded."""
    if isinstance(data, np.ndarray):
        view = data.reshape(-1).view(np.uint8)
    else:
        view = np.frombuffer(data, np.uint8)
    bulk = view.size - view.size % 4
    if bulk:
        device.write(handle, 0, view[:bulk])
    if bulk < view.size:
        tail = np.zeros(4, np.uint8)
        tail[:view.size - bulk] = view[bulk:]
        device.write(handle, bulk, tail)


__all__ = ["GpuForward", "FIRST_CAPACITY"]
