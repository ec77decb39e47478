"""Kernels for a fast first token: the native SIMD kernels until numba's have loaded.

numba's import and the loading of its cached kernels take ~0.35-0.5 s of a process's
start, more than a short prompt's whole prefill: `apr run MODEL "Hi" -n 1` spent most of
its time there. `QuickStartKernels` runs a short prompt (`prompt_limit`: at most
QUICK_PROMPT_WORK prompt tokens x bytes of layer weights) on the natively built browser
kernels (backend "simd", loaded in milliseconds) and switches to numba (`upgrade`) before
the first decode step, or before a longer prompt (the simd prefill is ~2-4x slower per
token than numba's, so past that work numba's load pays for itself). The switch happens at
that fixed point of a generation, never when a background load happens to finish, so a
run's tokens do not depend on timing. Both compute the prompt to float32 precision (the
simd kernels' exact activation split; numba's float products), and the scheduler prefills
numba's `uniform_rows` from the start.

When numba's cache is cold (a first run on this machine: compiling its kernels takes ~2
minutes, the simd library seconds) the kernels are `portable`: the whole process stays on
simd (decided before the first token, so again nothing depends on timing) while
`numba_warmup` compiles numba's kernels in the background for later runs (`settle`).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from apr_core.quant import registry
from apr_core.quant.block_kinds import BLOCK_KINDS

from .kernels import BACKEND

# The most prompt work a quick start computes on the simd kernels: prompt tokens x bytes of
# the layers' weights (what a prefill reads per token; the LM head reads one row). Past it
# numba's load plus its prefill take less than the simd prefill. Cold `apr run --raw -n 1`,
# 2-core AVX2-only host, simd / numba wall (s): Qwen2.5-0.5B Q4_K_M (247 MB of layer
# weights) 1.29 / 1.66 at 32 prompt tokens, 2.12 / 1.75 at 40; SmolLM2-135M Q4_1 (66 MB)
# 1.60 / 1.65 at 96, 2.05 / 1.83 at 128. Both cross near 8 GB (the 48 tokens before, from
# the AVX-512 host, left Qwen's 33-48 token prompts 0.3-0.4 s slower than numba alone).
QUICK_PROMPT_WORK = 8 * 10 ** 9


def prompt_limit(transformer: Any) -> int:
    """The longest prompt a quick start computes on the simd kernels for this model."""
    return QUICK_PROMPT_WORK // max(transformer.layer_weight_bytes(), 1)


class QuickStartKernels(registry.Kernels):
    """Backend "simd" until `upgrade`, then the kernels `load_fast()` returns;
    `portable`: simd for good (unless `switch`). `prompt_limit` (set by `settle` from the
    loaded model; 0 before) is the longest prompt the simd kernels take."""

    def __init__(self, load_fast: Callable[[], registry.Kernels], uniform_rows: int,
                 portable: bool = False) -> None:
        super().__init__(BACKEND, uniform_rows)
        self._load_fast: Optional[Callable[[], registry.Kernels]] = load_fast
        self.portable = portable
        self.prompt_limit = 0

    def upgrade(self, prompt_tokens: Optional[int] = None) -> None:
        if self.portable:
            return
        if prompt_tokens is not None and prompt_tokens <= self.prompt_limit:
            return
        self.switch()

    def switch(self) -> None:
        """numba's kernels from now on, whatever the mode (a model simd does not suit)."""
        if self._load_fast is None:
            return
        fast, self._load_fast = self._load_fast(), None
        self.portable = False
        self.become(fast)


def suits(transformer: Any) -> bool:
    """Whether every projection of the model's layers is a block type the simd kernels read
    (others would take numpy's kernel, which decodes the weight on every call)."""
    blocks = getattr(transformer, "blocks", None)
    return bool(blocks) and all(linear is None or (linear.dtype.name in BLOCK_KINDS
                                                   and linear.weight is None)
                                for block in blocks for linear in block.linears.values())


def settle(kernels: registry.Kernels, model_path: str, transformer: Any) -> None:
    """After the model loaded on quick-start kernels: its `prompt_limit`; a model the simd
    kernels do not suit goes to numba's now; a portable run starts numba's background
    compile."""
    if not isinstance(kernels, QuickStartKernels):
        return
    kernels.prompt_limit = prompt_limit(transformer)
    if not suits(transformer):
        kernels.switch()
    elif kernels.portable:
        from ..numba_warmup import start
        start(model_path)


def announce(building: bool, compiling_already: bool) -> None:
    """The one line a portable run prints (`building`: the simd library is built now)."""
    from ..config import notice
    if compiling_already:
        notice("numba's CPU kernels are still compiling in the background (once); this run "
               "uses the portable kernels%s" % (", built now (seconds)" if building else ""))
    elif building:
        notice("compiling the CPU kernels for this machine (once): the portable ones now "
               "(seconds) for this run, numba's faster ones in the background (~2 min)")
    else:
        notice("compiling numba's CPU kernels for this machine in the background (once, "
               "~2 min); this run uses the portable kernels")
