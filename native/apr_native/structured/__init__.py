"""Constrained decoding: JSON schemas (and so tool calls) as token masks, via llguidance.

    constraint = json_constraint(model.tokenizer, schema)       # a TokenConstraint
    GenerationRequest(ids, ..., constraint=constraint)

llguidance (the engine llama.cpp and vLLM use for structured output) was picked over
the other well-kept libraries because it needs nothing but its own wheel: xgrammar's
wheel requires torch, transformers and triton; outlines-core builds an index over the
whole vocabulary for each schema up front; lm-format-enforcer is pure Python and walks the
vocabulary per token. llguidance computes each token's mask lazily from a
token trie in Rust and takes a plain list of token byte strings, which is what apr's
tokenizers give.
"""
from .json_constraint import GrammarConstraint, json_constraint
from .vocabulary import ll_tokenizer

__all__ = ["GrammarConstraint", "json_constraint", "ll_tokenizer"]
