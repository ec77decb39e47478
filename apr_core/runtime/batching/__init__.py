"""Continuous batching over a paged KV cache (pure Python + numpy).

    request.py    what a caller asks for (GenerationRequest) and what it gets back (events)
    paged_kv.py   the block pool: fixed-size KV blocks, refcounts, prefix cache, budget
    batch_kv.py   one step's view of the pool for `Transformer.hidden_states`
    scheduler.py  FIFO admission, chunked prefill, decode steps, preemption
"""
