"""Byte-level BPE (GPT-2, LLaMA-3, Qwen2, SmolLM2 ...) and SentencePiece-style BPE.

Encoding a raw fragment: optional normalization, optional space escaping ("▁"), the
pre-tokenizer's word split, then per word: GPT-2's byte-to-unicode mapping (every UTF-8
byte becomes one printable character, so merges work on strings), then merges. Merging
follows llama.cpp's `llm_tokenizer_bpe_session`: repeatedly merge the adjacent pair with
the lowest merge rank, the leftmost one on ties, with a heap and a linked list so long
words stay O(n log n). A final symbol that is not a token falls back to one token per byte.
Words repeat a lot in real text, so results are cached per word.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import AprError, ErrorCode
from .bpe_ranks import PairRanks, merge_ranks
from .pretokenize import PreTokenizer, gguf_pre
from .tokenizer import Fragment, Tokenizer

_SPACE_MARK = "\u2581"   # SentencePiece's visible space
_CACHE_LIMIT = 1 << 16   # words remembered before the cache starts over


def bytes_to_unicode() -> Dict[int, str]:
    """GPT-2's reversible byte -> printable character map.

    Printable Latin-1 bytes map to themselves; the other 68 (controls, space, 0x7F-0xA0,
    0xAD) are shifted to U+0100 onwards, so no token text contains whitespace.
    """
    keep = (list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)))
    mapping = {b: chr(b) for b in keep}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return mapping


BYTE_TO_UNICODE = bytes_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}
# str.translate table from latin-1-decoded bytes to their GPT-2 characters.
_BYTE_TABLE = dict(BYTE_TO_UNICODE)


class BPETokenizer(Tokenizer):
    """BPE over merges with ranks. See `from_gguf` / `from_hf` for the settings."""

    model = "gpt2"

    def __init__(self, tokens: Sequence[str], attrs: Sequence[int],
                 merges: Sequence[Any], pre: PreTokenizer, *, ignore_merges: bool = False,
                 byte_encode: bool = True, escape_spaces: bool = False,
                 prefix_space: str = "", normalize: Optional[Callable[[str], str]] = None,
                 unescape_spaces: bool = False, strip_first_space: bool = False,
                 **special: Any) -> None:
        super().__init__(tokens, attrs, **special)
        self.pre = pre
        self.ignore_merges = ignore_merges
        self.byte_encode = byte_encode
        self.escape_spaces = escape_spaces
        # " " prepended to raw fragments lacking one: "always" each, "first" the text start.
        self.prefix_space = prefix_space
        self.normalize = normalize
        self.unescape_spaces = unescape_spaces or escape_spaces
        self.strip_space_after_special = strip_first_space
        self.ranks = merge_ranks(merges)
        self._cache: Dict[str, Tuple[int, ...]] = {}

    # -- construction --------------------------------------------------------------------

    @classmethod
    def from_gguf(cls, kv: Dict[str, Any]) -> "BPETokenizer":
        """From `tokenizer.ggml.*` keys (`model` "gpt2", or "gemma4": BPE over "▁" text)."""
        merges = kv.get("tokenizer.ggml.merges")
        if not isinstance(merges, list):
            raise AprError(ErrorCode.FORMAT, "BPE vocabulary has no tokenizer.ggml.merges")
        gemma = kv.get("tokenizer.ggml.model") == "gemma4"
        family, ignore_merges, add_bos = gguf_pre("gemma4" if gemma
                                                  else kv.get("tokenizer.ggml.pre"))
        # llama.cpp's defaults for BPE vocabularies before the metadata overrides them.
        defaults = {"add_bos": add_bos, "add_eos": False}
        if not gemma:
            defaults.update(bos_id=11, eos_id=11)
        common = cls.gguf_common(kv, defaults)
        args = common["args"]
        if gemma:
            args["add_bos"] = True        # llama.cpp forces BOS for Gemma 4
        return cls(common["tokens"], common["attrs"], merges, PreTokenizer.family(family),
                   ignore_merges=ignore_merges, byte_encode=not gemma, escape_spaces=gemma,
                   **args)

    @classmethod
    def from_hf(cls, data: Dict[str, Any], config: Dict[str, Any]) -> "BPETokenizer":
        """From a parsed HF tokenizer.json and (possibly empty) tokenizer_config.json."""
        from .hf_json import hf_settings
        tokenizer = cls(**hf_settings(data, config))
        tokenizer.decode_added_as_normal = True
        return tokenizer

    # -- encoding ------------------------------------------------------------------------

    def _encode_fragments(self, fragments: List[Fragment], out: List[int]) -> None:
        split = self.pre.split
        word_ids = self._word_ids
        for position, fragment in enumerate(fragments):
            if isinstance(fragment, int):
                out.append(fragment)
                continue
            text = fragment
            if self.normalize is not None:
                text = self.normalize(text)
            if (self.prefix_space == "always" or (self.prefix_space == "first" and not position)) \
                    and not text.startswith(" "):
                text = " " + text
            if self.escape_spaces:
                text = text.replace(" ", _SPACE_MARK)
            for word in split(text):
                out.extend(word_ids(word))

    def _word_ids(self, word: str) -> Tuple[int, ...]:
        ids = self._cache.get(word)
        if ids is not None:
            return ids
        if self.byte_encode:
            symbols = word.encode("utf-8").decode("latin-1").translate(_BYTE_TABLE)
        else:
            symbols = word
        whole = self.token_to_id.get(symbols) if self.ignore_merges else None
        if whole is not None:
            ids = (whole,)
        else:
            ids = tuple(self._symbols_to_ids(merge_word(symbols, self.ranks)))
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[word] = ids
        return ids

    def _symbols_to_ids(self, symbols: List[str]) -> List[int]:
        lookup = self.token_to_id.get
        ids: List[int] = []
        for symbol in symbols:
            tid = lookup(symbol)
            if tid is not None:
                ids.append(tid)
                continue
            # Not a token: one token per byte, skipping bytes the vocabulary lacks.
            if self.byte_encode:
                fallback = [lookup(ch) for ch in symbol]
            else:
                fallback = [lookup("<0x%02X>" % b) for b in symbol.encode("utf-8")]
            found = [t for t in fallback if t is not None]
            if not found and self.unk_id is not None:
                found = [self.unk_id]
            ids.extend(found)
        return ids

    # -- decoding ------------------------------------------------------------------------

    def _normal_piece(self, token_id: int) -> bytes:
        text = self.tokens[token_id]
        if self.unescape_spaces:
            return text.replace(_SPACE_MARK, " ").encode("utf-8")
        table = UNICODE_TO_BYTE
        try:
            return bytes([table[ch] for ch in text])
        except KeyError:
            return text.encode("utf-8")   # not byte-level text (an added token): keep it


def merge_word(word: str, ranks: PairRanks) -> List[str]:
    """Apply BPE merges to the characters of `word`; returns the final symbols. A pair
    (a, b) is looked up as `a + ranks.sep + b` (`bpe_ranks`)."""
    n = len(word)
    if n < 2:
        return [word] if n else []
    symbols: List[Optional[str]] = list(word)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prv = list(range(-1, n - 1))
    get = ranks.get
    sep = ranks.sep
    heap = []
    for i in range(n - 1):
        rank = get(symbols[i] + sep + symbols[i + 1])  # type: ignore[operator]
        if rank is not None:
            heap.append((rank, i, symbols[i], symbols[i + 1]))
    if not heap:
        return list(word)
    heapq.heapify(heap)
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        _, left, left_text, right_text = pop(heap)
        right = nxt[left]
        # Skip pairs that went stale when a neighbour merged first.
        if right < 0 or symbols[left] != left_text or symbols[right] != right_text:
            continue
        merged = left_text + right_text
        symbols[left], symbols[right] = merged, None
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prv[after] = left
        before = prv[left]
        if before >= 0:
            rank = get(symbols[before] + sep + merged)  # type: ignore[operator]
            if rank is not None:
                push(heap, (rank, before, symbols[before], merged))
        if after >= 0:
            rank = get(merged + sep + symbols[after])  # type: ignore[operator]
            if rank is not None:
                push(heap, (rank, left, merged, symbols[after]))
    out = []
    i = 0
    while i >= 0:
        out.append(symbols[i])
        i = nxt[i]
    return out
