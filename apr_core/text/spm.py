"""SentencePiece-style tokenizer (GGUF `tokenizer.ggml.model` = "llama").

The behaviour of llama.cpp's `llm_tokenizer_spm`: spaces become "▁" (U+2581), a "▁" is
prefixed to text at the start and after every special token when `add_space_prefix` is
set, then characters are merged bottom-up: among all adjacent pairs whose concatenation is
a token, the one whose token has the highest score merges first (leftmost on ties), until
no pair is a token. A symbol left that is not a token is emitted as its UTF-8 bytes through
the `<0xNN>` byte-fallback tokens.
"""
from __future__ import annotations

import heapq
from typing import Any, Dict, List, Optional, Sequence

from ..errors import AprError, ErrorCode
from .tokenizer import Fragment, Tokenizer

_SPACE_MARK = "\u2581"


class SPMTokenizer(Tokenizer):
    """Score-driven SentencePiece merge over a vocabulary with `scores`."""

    model = "llama"

    def __init__(self, tokens: Sequence[str], attrs: Sequence[int], scores: Sequence[float],
                 *, add_space_prefix: bool = True, **special: Any) -> None:
        super().__init__(tokens, attrs, **special)
        if len(scores) < len(self.tokens):
            raise AprError(ErrorCode.FORMAT, "fewer token scores than tokens",
                           tokens=len(self.tokens), scores=len(scores))
        self.scores = [float(s) for s in scores[:len(self.tokens)]]
        self.add_space_prefix = add_space_prefix
        self.strip_space_after_special = add_space_prefix
        self._byte_ids: Dict[int, Optional[int]] = {}

    @classmethod
    def from_gguf(cls, kv: Dict[str, Any]) -> "SPMTokenizer":
        """From `tokenizer.ggml.*` keys: tokens, scores, token types, special ids."""
        common = cls.gguf_common(kv, {"bos_id": 1, "eos_id": 2, "unk_id": 0,
                                      "add_bos": True, "add_eos": False})
        scores = kv.get("tokenizer.ggml.scores")
        if not isinstance(scores, list):
            raise AprError(ErrorCode.FORMAT, "SentencePiece vocabulary has no "
                           "tokenizer.ggml.scores")
        prefix = kv.get("tokenizer.ggml.add_space_prefix", True)
        return cls(common["tokens"], common["attrs"], scores,
                   add_space_prefix=bool(prefix), **common["args"])

    def _encode_fragments(self, fragments: List[Fragment], out: List[int]) -> None:
        after_special = True   # the text start counts as "after a special token"
        for fragment in fragments:
            if isinstance(fragment, int):
                out.append(fragment)
                after_special = True
                continue
            text = fragment
            if self.add_space_prefix and after_special:
                text = " " + text
            self._encode_text(text.replace(" ", _SPACE_MARK), out)
            after_special = False

    def _encode_text(self, text: str, out: List[int]) -> None:
        n = len(text)
        if not n:
            return
        lookup = self.token_to_id.get
        scores = self.scores
        symbols: List[str] = list(text)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prv = list(range(-1, n - 1))
        heap = []

        def add_pair(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            merged = symbols[left] + symbols[right]
            tid = lookup(merged)
            if tid is not None:
                # Highest score first, then the leftmost pair: a min-heap on (-score, left).
                heapq.heappush(heap, (-scores[tid], left, right, len(merged)))

        for i in range(n - 1):
            add_pair(i, i + 1)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            left_sym, right_sym = symbols[left], symbols[right]
            # A pair is stale once either side merged with something else (or vanished).
            if not left_sym or not right_sym or len(left_sym) + len(right_sym) != size:
                continue
            symbols[left], symbols[right] = left_sym + right_sym, ""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prv[after] = left
            add_pair(prv[left], left)
            add_pair(left, after)
        i = 0
        while i >= 0:
            symbol = symbols[i]
            tid = lookup(symbol)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._byte_token(b) for b in symbol.encode("utf-8"))
            i = nxt[i]

    def _byte_token(self, byte: int) -> int:
        """The `<0xNN>` token of a byte (else the one-character token, else <unk>)."""
        tid = self._byte_ids.get(byte, -1)
        if tid == -1:
            tid = self.token_to_id.get("<0x%02X>" % byte)
            if tid is None and byte < 0x80:
                tid = self.token_to_id.get(chr(byte))
            if tid is None:
                tid = self.unk_id
            self._byte_ids[byte] = tid
        if tid is None:
            raise AprError(ErrorCode.VALIDATION, "vocabulary has no token for a byte and no "
                           "<unk>", byte=byte)
        return tid

    def _normal_piece(self, token_id: int) -> bytes:
        return self.tokens[token_id].replace(_SPACE_MARK, " ").encode("utf-8")
