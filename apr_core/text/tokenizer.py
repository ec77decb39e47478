"""Tokenizer front door: built from GGUF metadata or a HF `tokenizer.json`, plus streaming.

`Tokenizer` holds what every vocabulary type shares: the token list, per-token attributes
(GGUF `tokenizer.ggml.token_type`), special ids, BOS/EOS policy, the split of text around
special and added tokens (done before any pre-tokenization, longest token first, as
llama.cpp's `tokenizer_st_partition`), and decoding. Subclasses implement the words-to-ids
step: `bpe.BPETokenizer` (byte-level and SentencePiece-style BPE) and `spm.SPMTokenizer`
(llama.cpp's score-driven SentencePiece merge). Unsupported vocabulary types (WordPiece
"bert", Unigram "t5", ...) raise `AprError(UNSUPPORTED)` naming the type.
"""
from __future__ import annotations

import codecs
from itertools import compress, repeat
from operator import and_
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ..errors import AprError, ErrorCode

# llama.cpp token attributes (bit flags); GGUF stores one *type* per token instead.
ATTR_UNKNOWN, ATTR_UNUSED, ATTR_NORMAL, ATTR_CONTROL = 1, 2, 4, 8
ATTR_USER_DEFINED, ATTR_BYTE, ATTR_LSTRIP, ATTR_RSTRIP = 16, 32, 128, 256
# GGUF token type (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte).
TYPE_TO_ATTR = {1: ATTR_NORMAL, 2: ATTR_UNKNOWN, 3: ATTR_CONTROL, 4: ATTR_USER_DEFINED,
                5: ATTR_UNUSED, 6: ATTR_BYTE}
SPECIAL_ATTRS = ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN
_RENDER_ONLY_IF_SPECIAL = ATTR_CONTROL | ATTR_UNKNOWN

# Tokens that end a generation even when the metadata names none of them (llama.cpp keeps
# the same list: converters often forget to mark chat-turn terminators; FIM pad/repo/file
# separators end generation too).
EOG_TOKEN_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                   "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                   "<end_of_utterance>", "<eos>", "<turn|>", "</s>", "<|fim_pad|>",
                   "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                   "<REPO>", "<reponame>", "<|file_sep|>")
_C_SPACE = " \t\n\v\f\r"   # isspace() in the C locale: what lstrip/rstrip remove

Fragment = Union[str, int]


class Tokenizer:
    """Text <-> token ids. Build with `apr_core.text.load` (`tokenizer_from_gguf`,
    `tokenizer_from_json`)."""

    model = ""
    # Strip one leading space from the first piece after the start or a special token:
    # the inverse of SentencePiece's space prefix, so decode(encode(s)) == s.
    strip_space_after_special = False
    # HF runs added (user-defined) tokens through the decoder; llama.cpp copies their text.
    decode_added_as_normal = False

    def __init__(self, tokens: Sequence[str], attrs: Sequence[int], *,
                 bos_id: Optional[int] = None, eos_id: Optional[int] = None,
                 unk_id: Optional[int] = None, pad_id: Optional[int] = None,
                 eot_id: Optional[int] = None, add_bos: bool = False, add_eos: bool = False,
                 chat_template: Optional[str] = None, mark_eog_control: bool = True) -> None:
        self.tokens: List[str] = list(tokens)
        self.attrs: List[int] = list(attrs)
        if len(self.attrs) != len(self.tokens):
            raise AprError(ErrorCode.FORMAT, "token attribute count differs from token count",
                           tokens=len(self.tokens), attrs=len(self.attrs))
        # a later duplicate wins, as in llama.cpp
        self.token_to_id: Dict[str, int] = dict(zip(self.tokens, range(len(self.tokens))))
        def valid(index: Optional[int]) -> Optional[int]:
            # An id outside the vocabulary disables that special token (llama.cpp does too).
            return index if index is not None and 0 <= index < len(self.tokens) else None
        self.bos_id, self.eos_id, self.unk_id = valid(bos_id), valid(eos_id), valid(unk_id)
        self.pad_id, self.eot_id = valid(pad_id), valid(eot_id)
        self.add_bos, self.add_eos = bool(add_bos), bool(add_eos)
        self.chat_template = chat_template
        eog = {i for i in (self.eos_id, self.eot_id) if i is not None}
        # Gemma 4 has an ordinary "</s>" (it ends turns with other tokens).
        normal_s = "<|tool_response>" in self.token_to_id
        for text in EOG_TOKEN_TEXTS:
            index = self.token_to_id.get(text)
            if index is None or (normal_s and text == "</s>"):
                continue
            if mark_eog_control:
                # llama.cpp makes these control tokens whatever the GGUF says.
                self.attrs[index] |= ATTR_CONTROL
            if self.attrs[index] & ATTR_CONTROL:
                eog.add(index)
        self.eog_ids = frozenset(eog)
        # Longest first so "<|im_start|>" wins over any shorter token inside it.
        specials = compress(range(len(self.attrs)), map(and_, self.attrs, repeat(SPECIAL_ATTRS)))
        self._special_ids = sorted(specials,
                                   key=lambda i: (-len(self.tokens[i].encode("utf-8")), i))
        self._piece_cache: Dict[int, bytes] = {}

    # -- construction --------------------------------------------------------------------

    @staticmethod
    def gguf_common(kv: Dict[str, Any], defaults: Dict[str, Any]) -> Dict[str, Any]:
        """Tokens, attributes and special-token settings shared by every GGUF vocabulary."""
        tokens = kv.get("tokenizer.ggml.tokens")
        if not isinstance(tokens, list) or not tokens:
            raise AprError(ErrorCode.FORMAT, "GGUF tokenizer.ggml.tokens missing or empty")
        if not all(map(isinstance, tokens, repeat(str))):
            raise AprError(ErrorCode.FORMAT, "tokenizer.ggml.tokens must be strings")
        tokens = list(tokens)
        if "" in tokens:
            tokens = [t if t else "[EMPTY_{}]".format(i) for i, t in enumerate(tokens)]
        types = kv.get("tokenizer.ggml.token_type")
        if types is None:
            attrs = [ATTR_NORMAL] * len(tokens)
        else:
            if len(types) < len(tokens):
                raise AprError(ErrorCode.FORMAT, "fewer token types than tokens",
                               tokens=len(tokens), types=len(types))
            attrs = list(map(TYPE_TO_ATTR.get, map(int, types[:len(tokens)]), repeat(0)))
        args = dict(defaults)
        for key, name in (("bos", "bos_id"), ("eos", "eos_id"), ("unknown", "unk_id"),
                          ("padding", "pad_id"), ("eot", "eot_id")):
            value = kv.get("tokenizer.ggml.{}_token_id".format(key))
            if isinstance(value, int) and 0 <= value < len(tokens):
                args[name] = value
        for key in ("add_bos", "add_eos"):
            value = kv.get("tokenizer.ggml.{}_token".format(key))
            if isinstance(value, bool):
                args[key] = value
        args["chat_template"] = kv.get("tokenizer.chat_template")
        name = str(kv.get("general.name") or "").lower()
        if "phi-3" in name or "phi3" in name:
            # Phi-3 eats the whitespace after its special tokens (llama.cpp does the same).
            for i, attr in enumerate(attrs):
                if attr & SPECIAL_ATTRS or tokens[i] == "</s>":
                    attrs[i] |= ATTR_RSTRIP
                if tokens[i] in ("<unk>", "<s>", "<|endoftext|>"):
                    attrs[i] &= ~ATTR_RSTRIP
        return {"tokens": tokens, "attrs": attrs, "args": args}

    # -- encoding ------------------------------------------------------------------------

    def encode(self, text: str, add_special: bool = True,
               parse_special: bool = True) -> List[int]:
        """Token ids of `text`.

        add_special: add BOS/EOS as the model's metadata asks. parse_special: control
        tokens written in the text (e.g. "<|im_start|>") become their ids; user-defined
        (added) tokens are always matched, as in HF tokenizers and llama.cpp.
        """
        text = _valid_text(text)
        out: List[int] = []
        if add_special and self.add_bos:
            out.append(self._require(self.bos_id, "BOS"))
        if text:
            self._encode_fragments(self.partition(text, parse_special), out)
        if add_special and self.add_eos:
            out.append(self._require(self.eos_id, "EOS"))
        return out

    def partition(self, text: str, parse_special: bool = True) -> List[Fragment]:
        """Split `text` into raw strings and special-token ids."""
        fragments: List[Fragment] = [text]
        for tid in self._special_ids:
            attr = self.attrs[tid]
            if not parse_special and attr & _RENDER_ONLY_IF_SPECIAL:
                continue
            token = self.tokens[tid]
            if not token or token not in text:
                continue  # an empty special token can never match (str.split("") raises)
            result: List[Fragment] = []
            for fragment in fragments:
                if isinstance(fragment, int) or token not in fragment:
                    result.append(fragment)
                    continue
                parts = fragment.split(token)
                last = len(parts) - 1
                for k, part in enumerate(parts):
                    if k:
                        result.append(tid)
                    if attr & ATTR_LSTRIP and k < last:
                        part = part.rstrip(_C_SPACE)
                    if attr & ATTR_RSTRIP and k:
                        part = part.lstrip(_C_SPACE)
                    if part:
                        result.append(part)
            fragments = result
        return fragments

    def _encode_fragments(self, fragments: List[Fragment], out: List[int]) -> None:
        raise NotImplementedError

    def _require(self, token_id: Optional[int], what: str) -> int:
        if token_id is None:
            raise AprError(ErrorCode.VALIDATION, "the model asks for a {} token but has none"
                           .format(what), model=self.model)
        return token_id

    # -- decoding ------------------------------------------------------------------------

    def _normal_piece(self, token_id: int) -> bytes:
        """Bytes of a NORMAL token (subclasses undo their byte/space encoding)."""
        raise NotImplementedError

    def token_bytes(self, token_id: int, skip_special: bool = False) -> bytes:
        """Raw bytes one token stands for (may be part of a UTF-8 character)."""
        if not 0 <= token_id < len(self.tokens):
            raise AprError(ErrorCode.ARGUMENT, "token id out of range", token_id=token_id,
                           n_vocab=len(self.tokens))
        attr = self.attrs[token_id]
        if attr & _RENDER_ONLY_IF_SPECIAL:
            return b"" if skip_special else self.tokens[token_id].encode("utf-8")
        piece = self._piece_cache.get(token_id)
        if piece is None:
            text = self.tokens[token_id]
            if attr & ATTR_USER_DEFINED and not self.decode_added_as_normal:
                piece = text.encode("utf-8")
            elif attr & (ATTR_NORMAL | ATTR_USER_DEFINED):
                piece = self._normal_piece(token_id)
            elif attr & ATTR_BYTE:
                piece = bytes([int(text[3:5], 16)])
            else:
                piece = b""       # unused / undefined tokens render as nothing
            self._piece_cache[token_id] = piece
        return piece

    def piece(self, token_id: int, skip_special: bool, after_special: bool) -> Tuple[bytes, bool]:
        """(bytes, is_special) of one token in a stream; see `strip_space_after_special`."""
        data = self.token_bytes(token_id, skip_special)
        special = bool(self.attrs[token_id] & SPECIAL_ATTRS)
        if (after_special and not special and self.strip_space_after_special
                and data[:1] == b" "):
            data = data[1:]
        return data, special

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of `ids`; bytes that are not valid UTF-8 become U+FFFD."""
        parts = []
        after_special = True
        for token_id in ids:
            data, after_special = self.piece(int(token_id), skip_special, after_special)
            parts.append(data)
        return b"".join(parts).decode("utf-8", "replace")

    def is_eog(self, token_id: int) -> bool:
        """True for tokens that end a generation (EOS, EOT, <|im_end|> ...)."""
        return token_id in self.eog_ids

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


class StreamingDetokenizer:
    """Turns ids, one at a time, into text, never emitting part of a UTF-8 character.

    `add(id)` returns the text that became complete (often ""); `flush()` returns what is
    left at the end (an incomplete character becomes U+FFFD, as in `decode`). The
    concatenation of everything returned equals `tokenizer.decode(ids)`.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._after_special = True

    def add(self, token_id: int) -> str:
        data, self._after_special = self.tokenizer.piece(int(token_id), self.skip_special,
                                                         self._after_special)
        return self._decoder.decode(data)

    def flush(self) -> str:
        text = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        self._after_special = True
        return text


def _valid_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD, as llama.cpp treats bad UTF-8."""
    if not isinstance(text, str):
        raise AprError(ErrorCode.ARGUMENT, "text to tokenize must be str",
                       type=type(text).__name__)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    return text
