"""Continuous batching: requests join and leave the running batch between steps.

    scheduler = Scheduler(model.transformer, model.tokenizer, pool, max_batch=16)
    scheduler.submit(GenerationRequest(ids, max_tokens=64), events.append)
    while scheduler.has_work():
        scheduler.step()

A step takes every running sequence's next position (one row each while decoding) and
fills the rest of the token budget (`step_tokens`) with prompt chunks of sequences still
prefilling, in admission order, so a long prompt is prefilled over several steps while
the streams already running keep getting a token each step. All rows run as one forward
pass (`Transformer.forward_rows` over a `BatchKV`): the projections see a `[rows, d]`
matrix, attention reads each sequence's own blocks.

Admission is FIFO: the oldest waiting sequence is admitted when the batch has room
(`max_batch`) and the pool has free blocks for its whole prompt (after the prefix-cache
lookup), and nobody overtakes it. When a running sequence needs a block and none is free,
the youngest other running sequence is preempted: its blocks are released (full ones stay
findable in the prefix cache) and it goes back to the front of the queue, to be
recomputed (prompt + what it generated) on readmission; its sampler state is kept, so
its output is what it would have been. A sequence alone in the batch that still runs out
ends with finish_reason "length".

Speculative decoding (a request's `speculative`, see `runtime/speculative.py`): a decoding
sequence's step runs its pending token plus a draft as rows of the same pass; all their
logits come back and are verified in order (`_verify`); the computed length then moves
back past what was rejected. On a backend whose kernels change with the row count
(`min_prefill_rows` > 1: numba's integer dots up to `apr_native.numba_rows.DOT_MAX_TOKENS`
rows) a sequence's verification rows stay below that count, so every row is computed as
one-token decoding computes it.
"""
from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Deque, Dict, List, Optional

import numpy as np

from ...errors import AprError, ErrorCode
from .batch_kv import BatchKV
from .paged_kv import BlockPool
from .request import (MAX_TOP_LOGPROBS, ErrorEvent, FinishEvent, GenerationRequest,
                      TokenEvent)
from .sequence import Emit, RequestState, Sequence, log_softmax

DEFAULT_MAX_BATCH = 16
DEFAULT_STEP_TOKENS = 256


class Scheduler:
    """Runs many generations over one model and one block pool. Not thread-safe: call
    `submit`, `cancel` and `step` from one thread."""

    def __init__(self, model: Any, tokenizer: Any, pool: BlockPool,
                 max_batch: int = DEFAULT_MAX_BATCH, step_tokens: int = DEFAULT_STEP_TOKENS,
                 min_prefill_rows: int = 1) -> None:
        """`min_prefill_rows`: a prefix-cache hit still leaves this many prompt positions
        to compute. A backend whose kernels change with the row count of a pass (integer
        dots for a few rows, float products for many) sets it past the few, so a hit
        computes the prompt's last rows as a cold prefill of the whole prompt does and
        its logits are the same."""
        if max_batch < 1 or step_tokens < 1:
            raise AprError(ErrorCode.ARGUMENT, "max_batch and step_tokens must be positive",
                           max_batch=max_batch, step_tokens=step_tokens)
        self.model = model
        self.tokenizer = tokenizer
        self.pool = pool
        self.max_batch = max_batch
        self.step_tokens = max(step_tokens, max_batch)
        self.min_prefill_rows = max(1, min_prefill_rows)
        # most rows a verification pass may have and still compute as decoding does
        self.verify_rows = self.min_prefill_rows - 1 if self.min_prefill_rows > 1 else 0
        self.waiting: Deque[Sequence] = deque()
        self.running: List[Sequence] = []
        self._ids = itertools.count()
        self.eog = frozenset(tokenizer.eog_ids)
        self.stats: Dict[str, int] = {"prompt_tokens": 0, "cached_tokens": 0,
                                      "generated_tokens": 0, "preempted": 0, "steps": 0,
                                      "drafted_tokens": 0, "accepted_tokens": 0}

    # ------------------------------------------------------------------ requests

    def submit(self, request: GenerationRequest, emit: Emit) -> RequestState:
        """Queue `request`; its events go to `emit` (called from `step`). Bad requests
        raise AprError(ARGUMENT / MEMORY) here, before anything is queued."""
        cfg = self.model.config
        ids = [int(t) for t in request.prompt_ids]
        if not ids:
            raise AprError(ErrorCode.ARGUMENT, "generation needs at least one prompt token")
        if min(ids) < 0 or max(ids) >= cfg.n_vocab:
            raise AprError(ErrorCode.ARGUMENT, "prompt token id outside the vocabulary",
                           n_vocab=cfg.n_vocab)
        biased = [t for t, _ in request.sampler.logit_bias] + list(request.logit_bias)
        if any(not 0 <= int(t) < cfg.n_vocab for t in biased):
            raise AprError(ErrorCode.ARGUMENT, "logit bias for a token id outside the "
                           "vocabulary", n_vocab=cfg.n_vocab)
        if len(ids) >= cfg.max_ctx:
            raise AprError(ErrorCode.ARGUMENT, "prompt is as long as the model's context",
                           prompt_tokens=len(ids), context=cfg.max_ctx)
        if request.max_tokens < 0 or not 1 <= request.n <= 128 or (
                request.logprobs is not None
                and not 0 <= request.logprobs <= MAX_TOP_LOGPROBS):
            raise AprError(ErrorCode.ARGUMENT, "max_tokens, n or logprobs out of range")
        bs = self.pool.block_size
        if (len(ids) + 1 + bs - 1) // bs > self.pool.n_blocks:
            raise AprError(ErrorCode.MEMORY, "prompt needs more KV memory than the budget",
                           prompt_tokens=len(ids), budget_tokens=self.pool.n_blocks * bs)
        state = RequestState(request, emit, next(self._ids))
        first = Sequence(state, 0, self.tokenizer, ids)
        state.choices.append(first)
        self.stats["prompt_tokens"] += len(ids)
        if request.max_tokens == 0:
            self._finish(first, "length")
        else:
            self.waiting.append(first)
        return state

    def cancel(self, state: RequestState) -> None:
        """Stop every choice of `state` now and free its blocks (no more events)."""
        state.cancelled = True
        for seq in state.choices:
            self._drop(seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # ------------------------------------------------------------------ one step

    def step(self) -> int:
        """Admit, run one forward pass over the batch, sample; the rows computed."""
        self._admit()
        segments = self._plan()
        if not segments:
            return 0
        self.stats["steps"] += 1
        ids: List[int] = []
        for seq, count in segments:
            ids.extend(seq.pending(count))
        batch = BatchKV(self.pool, [(seq.blocks, seq.computed, count)
                                    for seq, count in segments], self.model.kernels)
        # speculative decode steps: their pending token and draft are all verified
        verified = {i for i, (seq, count) in enumerate(segments)
                    if seq.speculator is not None and seq.generated
                    and seq.computed == len(seq.tokens) - 1 and count == seq.to_compute}
        # (segment, rows whose logits it needs): the last, or all of a verified one
        sampling = [(i, count if i in verified else 1)
                    for i, (seq, count) in enumerate(segments) if count == seq.to_compute]
        rows = [batch.last_rows[i] - n + 1 + r for i, n in sampling for r in range(n)]
        try:
            logits = self.model.forward_rows(ids, batch, rows)      # [len(rows), n_vocab]
        except Exception as err:   # a failed step fails its requests, not the scheduler
            for seq, _ in segments:
                self._fail(seq.state, err)
            return 0
        for i, (seq, count) in enumerate(segments):
            if i not in verified:
                seq.computed += count
                self._register_full_blocks(seq)
        first = 0
        for i, n in sampling:
            seq = segments[i][0]
            if i in verified and not seq.finished:
                self._verify(seq, logits[first:first + n])           # [n, n_vocab]
            elif not seq.finished:
                for choice in self._fork(seq):
                    self._sample(choice, logits[first])               # [n_vocab]
            first += n
        return len(ids)

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_batch:
            seq = self.waiting[0]
            if not self._take_prefix(seq):
                return
            self.waiting.popleft()
            self.running.append(seq)

    def _take_prefix(self, seq: Sequence) -> bool:
        """Reuse cached blocks of `seq`'s prefix; True when the pool also has free blocks
        for the rest of its tokens (else nothing is taken)."""
        bs, tokens = self.pool.block_size, seq.tokens
        parent: Optional[bytes] = None
        found: List[int] = []
        keys: List[bytes] = []
        for i in range(max(len(tokens) - self.min_prefill_rows, 0) // bs):
            key = self.pool.chain_hash(parent, tokens[i * bs:(i + 1) * bs])
            block = self.pool.lookup(key)
            if block is None:
                break
            found.append(block)
            keys.append(key)
            parent = key
        needed = (len(tokens) + bs - 1) // bs - len(found)
        if needed > self.pool.free:
            self.pool.release_all(found)
            return False
        seq.blocks, seq.keys, seq.computed = found, keys, len(found) * bs
        if seq.generated == 0:
            seq.cached_tokens = seq.computed
            self.stats["cached_tokens"] += seq.computed
        return True

    def _plan(self) -> List[Any]:
        """(sequence, rows) of this step: decode rows first, then prompt chunks, with
        blocks allocated for them (preempting the youngest when the pool is full)."""
        segments = []
        budget = self.step_tokens
        for seq in sorted(self.running, key=lambda s: not s.decoding):
            if seq not in self.running:           # preempted while planning
                continue
            if seq.speculator is not None and seq.decoding:
                self._draft(seq, budget)
            count = min(seq.to_compute, budget)
            if count <= 0:
                continue
            if not self._grow(seq, seq.computed + count):
                continue
            segments.append((seq, count))
            budget -= count
        return [(seq, count) for seq, count in segments if seq in self.running]

    def _draft(self, seq: Sequence, budget: int) -> None:
        """Let `seq`'s speculator draft what this step can verify: within the token
        budget, the backend's exact row count, max_tokens, the context, and the blocks
        the pool has free (a draft never preempts anyone)."""
        bs, cfg = self.pool.block_size, self.model.config
        room = (len(seq.blocks) + self.pool.free) * bs - len(seq.tokens)
        limit = min(budget - 1, seq.state.request.max_tokens - seq.generated - 1,
                    cfg.max_ctx - len(seq.tokens) - 1, room)
        if self.verify_rows:
            limit = min(limit, self.verify_rows - 1)
        seq.speculator.propose(seq.tokens, limit)

    def _verify(self, seq: Sequence, logits: np.ndarray) -> None:
        """Check `seq`'s pending token's and draft's rows `logits [1 + draft, n_vocab]` in
        order: emit each kept draft token, then the first token that is not the draft's
        (or the bonus token after the whole draft); forget the rejected rows' KV."""
        spec = seq.speculator
        spec.start_pass()
        self.stats["drafted_tokens"] += len(spec.draft)
        for row in range(logits.shape[0]):
            token, kept = spec.verify(seq.sampler, seq.mask_logits(logits[row], self.eog),
                                      seq.tokens, row)
            spec.record(kept)
            self.stats["accepted_tokens"] += kept
            self._take(seq, token, logits[row])
            if seq.finished or not kept:
                break
        spec.end_pass()
        if seq.finished:
            return
        # the pending token and the kept drafts have their KV; the last emitted token is
        # the new pending one; the rejected rows' KV is zeroed, their blocks released
        end = seq.computed + logits.shape[0]                 # positions the pass wrote
        seq.computed = len(seq.tokens) - 1
        self.pool.clear(seq.blocks, seq.computed, end)       # rejected rows: as never drafted
        keep = -(-(seq.computed + 1) // self.pool.block_size)
        self.pool.release_all(seq.blocks[keep:])           # blocks only rejected rows used
        del seq.blocks[keep:]
        self._register_full_blocks(seq)

    def _grow(self, seq: Sequence, positions: int) -> bool:
        """Blocks for `positions` positions of `seq`, preempting others when needed."""
        bs = self.pool.block_size
        while len(seq.blocks) * bs < positions:
            block = self.pool.allocate()
            if block is not None:
                seq.blocks.append(block)
                continue
            victim = self.running[-1]
            if victim is seq and len(self.running) == 1:
                self._finish(seq, "length")      # alone and the budget is spent
                return False
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.pool.release_all(seq.blocks)
        seq.reset_kv()
        self.waiting.appendleft(seq)
        self.stats["preempted"] += 1

    def _register_full_blocks(self, seq: Sequence) -> None:
        bs = self.pool.block_size
        while (len(seq.keys) + 1) * bs <= seq.computed:
            i = len(seq.keys)
            key = self.pool.chain_hash(seq.keys[-1] if seq.keys else None,
                                       seq.tokens[i * bs:(i + 1) * bs])
            self.pool.register(seq.blocks[i], key)
            seq.keys.append(key)

    def _fork(self, seq: Sequence) -> List[Sequence]:
        """At a request's first sample, its other n-1 choices branch off the prompt:
        full blocks shared, the partial last block copied."""
        state = seq.state
        if state.forked:
            return [seq]
        state.forked = True
        choices = [seq]
        bs = self.pool.block_size
        for index in range(1, state.request.n):
            twin = Sequence(state, index, self.tokenizer, list(seq.tokens))
            full = seq.computed // bs
            for block in seq.blocks[:full]:
                self.pool.share(block)
            twin.blocks, twin.keys = list(seq.blocks[:full]), list(seq.keys)
            twin.computed, twin.cached_tokens = seq.computed, seq.cached_tokens
            if seq.computed % bs:
                block = self.pool.allocate()
                if block is None:          # no room for the copy: recompute it later
                    self.pool.release_all(twin.blocks)
                    twin.reset_kv()
                    state.choices.append(twin)
                    self.waiting.appendleft(twin)
                    continue
                self.pool.copy(seq.blocks[full], block, seq.computed % bs)
                twin.blocks.append(block)
            state.choices.append(twin)
            self.running.append(twin)
            choices.append(twin)
        return choices

    # ------------------------------------------------------------------ sampling

    def _sample(self, seq: Sequence, logits: np.ndarray) -> None:
        if seq.constraint is not None and seq.constraint.done():
            self._finish(seq, seq.constraint.finish_reason)
            return
        self._take(seq, seq.sampler(seq.mask_logits(logits, self.eog), seq.tokens), logits)

    def _take(self, seq: Sequence, token: int, logits: np.ndarray) -> None:
        """`token` is `seq`'s next (chosen from `logits [n_vocab]`): emit it or finish."""
        req = seq.state.request
        if (token in self.eog and not req.ignore_eos) or token in req.stop_ids:
            self._finish(seq, "stop")
            return
        logprob = top = None
        if req.logprobs is not None:
            lp = log_softmax(logits)                                    # [n_vocab]
            logprob = float(lp[token])
            if req.logprobs:
                best = np.argsort(-lp, kind="stable")[:req.logprobs]
                top = [(int(t), float(lp[t])) for t in best]
        if seq.constraint is not None:
            seq.constraint.advance(token)
        text, stopped = seq.text.add(token)
        seq.tokens.append(token)
        seq.generated += 1
        self.stats["generated_tokens"] += 1
        seq.state.emit(TokenEvent(seq.index, token, text, logprob, top))
        if stopped:
            self._finish(seq, "stop")
        elif seq.constraint is not None and seq.constraint.done():
            self._finish(seq, seq.constraint.finish_reason)
        elif seq.generated >= req.max_tokens or len(seq.tokens) >= self.model.config.max_ctx:
            self._finish(seq, "length")

    def _finish(self, seq: Sequence, reason: str) -> None:
        state = seq.state
        self._drop(seq)
        state.finished += 1
        state.emit(FinishEvent(seq.index, reason, seq.text.finish(), seq.n_prompt,
                               seq.generated, seq.cached_tokens, None
                               if seq.speculator is None else seq.speculator.stats()))

    def _drop(self, seq: Sequence) -> None:
        """Out of the queues, blocks released."""
        if seq.finished:
            return
        seq.finished = True
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.pool.release_all(seq.blocks)
        seq.reset_kv()

    def _fail(self, state: RequestState, err: Exception) -> None:
        if state.done:
            return
        self.cancel(state)
        state.emit(ErrorEvent(err))


__all__ = ["Scheduler", "DEFAULT_MAX_BATCH", "DEFAULT_STEP_TOKENS"]
