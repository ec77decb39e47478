"""apr's tokenizer as llguidance sees it: every token's bytes, special tokens marked.

llguidance matches grammar text against token bytes; control tokens (`<|im_end|>`) must
never match text, so their bytes get llguidance's 0xFF prefix, as its llama.cpp adapter
does (control tokens, and user-defined ones that look like `<...>`). Built once per tokenizer (a second or so on a 150k vocabulary) and kept while the
tokenizer lives.
"""
from __future__ import annotations

import weakref
from typing import Any, List

from apr_core.text.tokenizer import ATTR_CONTROL, ATTR_USER_DEFINED

_cache: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


class _Vocabulary:
    """What `llguidance.TokenizerWrapper` reads from a tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        eog = sorted(tokenizer.eog_ids)
        self.eos_token_id = tokenizer.eos_id if tokenizer.eos_id is not None else (
            eog[0] if eog else 0)
        self.bos_token_id = tokenizer.bos_id
        self.tokens: List[bytes] = []
        self.special_token_ids: List[int] = []
        for token_id in range(tokenizer.n_vocab):
            piece = tokenizer.token_bytes(token_id)
            attr = tokenizer.attrs[token_id]
            if attr & ATTR_CONTROL or (attr & ATTR_USER_DEFINED and piece.startswith(b"<")
                                       and piece.endswith(b">")):
                piece = b"\xff" + piece
                self.special_token_ids.append(token_id)
            self.tokens.append(piece)

    def __call__(self, text: Any) -> List[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        return self.tokenizer.encode(text, add_special=False, parse_special=False)


def ll_tokenizer(tokenizer: Any) -> Any:
    """The `llguidance.LLTokenizer` of an apr tokenizer (cached)."""
    found = _cache.get(tokenizer)
    if found is None:
        import llguidance
        vocabulary = _Vocabulary(tokenizer)
        found = llguidance.LLTokenizer(llguidance.TokenizerWrapper(vocabulary),
                                       eos_token=sorted(tokenizer.eog_ids) or None)
        _cache[tokenizer] = found
    return found


__all__ = ["ll_tokenizer"]
