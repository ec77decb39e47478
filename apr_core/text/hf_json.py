"""Read a HF `tokenizer.json` (BPE model) into `BPETokenizer` settings.

Understood: model BPE (vocab, merges as "a b" strings or pairs, byte_fallback,
ignore_merges); added_tokens (special -> control, else user-defined; lstrip/rstrip);
normalizers NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace, Strip, Sequence;
pre-tokenizers ByteLevel, Split (Isolated), Digits, Metaspace, Sequence;
TemplateProcessing / Roberta / Bert post-processors (which tokens wrap a sequence);
decoders ByteLevel / Metaspace / Replace("▁", " ") / Strip. Anything else raises
`AprError(UNSUPPORTED)` naming the component, rather than tokenizing differently.
`tokenizer_config.json` may override add_bos/add_eos and the special tokens.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import AprError, ErrorCode
from .pretokenize import PRE_PATTERNS, PreTokenizer
from .tokenizer import (ATTR_BYTE, ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP,
                        ATTR_UNUSED, ATTR_USER_DEFINED)

_SPACE_MARK = "\u2581"
_GPT2_HF = PRE_PATTERNS["gpt2"][0] + r"|\s+"
_BYTE_TOKEN = re.compile(r"<0x[0-9A-Fa-f]{2}>\Z")
_BEHAVIORS = {"Isolated": "isolated", "Removed": "removed", "Contiguous": "contiguous",
              "MergedWithPrevious": "merged_with_previous", "MergedWithNext": "merged_with_next"}


def _unsupported(component: str, kind: Any) -> AprError:
    return AprError(ErrorCode.UNSUPPORTED, "unsupported tokenizer.json component",
                    component=component, type=kind)


def _items(node: Optional[Dict[str, Any]], key: str) -> List[Dict[str, Any]]:
    """Flatten a component that may be a Sequence of components."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        out: List[Dict[str, Any]] = []
        for child in node.get(key) or []:
            out.extend(_items(child, key))
        return out
    return [node]


def _pattern(spec: Any) -> str:
    """A tokenizer.json pattern ({"Regex": ...} or {"String": ...}) as regex source."""
    if isinstance(spec, dict) and "Regex" in spec:
        return spec["Regex"]
    if isinstance(spec, dict) and "String" in spec:
        return re.escape(spec["String"])
    raise _unsupported("pattern", repr(spec)[:60])


def _normalizer(node: Optional[Dict[str, Any]]) -> Optional[Callable[[str], str]]:
    steps: List[Callable[[str], str]] = []
    for item in _items(node, "normalizers"):
        kind = item.get("type")
        if kind in ("NFC", "NFD", "NFKC", "NFKD"):
            steps.append(lambda s, form=kind: unicodedata.normalize(form, s))
        elif kind == "Lowercase":
            steps.append(str.lower)
        elif kind == "Prepend":
            steps.append(lambda s, p=item.get("prepend", ""): p + s if s else s)
        elif kind == "Replace":
            regex = re.compile(_pattern(item.get("pattern")))
            steps.append(lambda s, r=regex, c=item.get("content", ""): r.sub(c, s))
        elif kind == "Strip":
            left, right = item.get("strip_left", True), item.get("strip_right", True)
            steps.append(lambda s, a=left, b=right:
                         (s.lstrip() if a else s).rstrip() if b else (s.lstrip() if a else s))
        else:
            raise _unsupported("normalizer", kind)
    if not steps:
        return None

    def normalize(text: str) -> str:
        for step in steps:
            text = step(text)
        return text
    return normalize


def _pre_tokenizer(node: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    patterns: List[Any] = []
    out: Dict[str, Any] = {"byte_encode": False, "prefix_space": "", "escape_spaces": False,
                           "strip_first_space": False}
    for item in _items(node, "pretokenizers"):
        kind = item.get("type")
        if kind == "ByteLevel":
            out["byte_encode"] = True
            if item.get("add_prefix_space"):
                out["prefix_space"] = "always"
            if item.get("use_regex", True):
                patterns.append(_GPT2_HF)
        elif kind == "Split":
            behavior = _BEHAVIORS.get(item.get("behavior"))
            if behavior is None:
                raise _unsupported("Split behavior", item.get("behavior"))
            patterns.append((_pattern(item.get("pattern")), behavior, bool(item.get("invert"))))
        elif kind == "Digits":
            patterns.append(r"\p{N}" if item.get("individual_digits") else r"\p{N}+")
        elif kind == "Metaspace":
            out["escape_spaces"] = True
            scheme = item.get("prepend_scheme") or (
                "always" if item.get("add_prefix_space", True) else "never")
            if scheme != "never":
                out["prefix_space"] = "first" if scheme == "first" else "always"
                out["strip_first_space"] = True
            if item.get("split", True):
                patterns.append(_SPACE_MARK + "[^" + _SPACE_MARK + "]*|[^" + _SPACE_MARK + "]+")
        else:
            raise _unsupported("pre_tokenizer", kind)
    out["pre"] = PreTokenizer(patterns)
    return out


def _decoder_unescapes(node: Optional[Dict[str, Any]]) -> Tuple[bool, bool]:
    """(turns "▁" back into spaces, strips the first space) for a decoder component."""
    unescape = strip = False
    for item in _items(node, "decoders"):
        kind = item.get("type")
        if kind == "Metaspace":
            unescape = True
            strip = strip or item.get("prepend_scheme", "always") != "never"
        elif kind == "Replace" and item.get("pattern") == {"String": _SPACE_MARK}:
            unescape = True
        elif kind == "Strip" and item.get("start", 0) >= 1:
            strip = True
    return unescape, strip


def _wrapping(post: Optional[Dict[str, Any]], ids: Dict[str, int]) -> Tuple[List[int], List[int]]:
    """Special ids a post-processor puts before and after a single sequence."""
    before: List[int] = []
    after: List[int] = []
    for item in _items(post, "processors"):
        kind = item.get("type")
        if kind == "TemplateProcessing":
            specials = item.get("special_tokens") or {}
            seen_sequence = False
            for piece in item.get("single") or []:
                if "Sequence" in piece:
                    seen_sequence = True
                elif "SpecialToken" in piece:
                    name = piece["SpecialToken"].get("id")
                    found = (specials.get(name) or {}).get("ids") or [ids.get(name)]
                    (after if seen_sequence else before).extend(
                        i for i in found if isinstance(i, int))
        elif kind in ("RobertaProcessing", "BertProcessing"):
            cls_tok, sep_tok = item.get("cls"), item.get("sep")
            if cls_tok:
                before.append(int(cls_tok[1]))
            if sep_tok:
                after.append(int(sep_tok[1]))
        elif kind not in ("ByteLevel",):
            raise _unsupported("post_processor", kind)
    return before, after


def _token_name(value: Any) -> Optional[str]:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


MAX_ID_HOLES = 1 << 16


def _token_id(value: Any, token: Any) -> int:
    """A token id as tokenizer.json writes it: a non-negative JSON integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AprError(ErrorCode.FORMAT, "tokenizer.json token id is not a non-negative "
                       "integer", token=repr(token)[:40], id=repr(value)[:40])
    return value


def hf_settings(data: Dict[str, Any], config: Dict[str, Any]) -> Dict[str, Any]:
    """Keyword arguments for `BPETokenizer(...)` from tokenizer.json + tokenizer_config."""
    model = data.get("model") or {}
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise AprError(ErrorCode.FORMAT, "tokenizer.json model has no vocab object")
    added = [t for t in data.get("added_tokens") or [] if isinstance(t, dict)]
    # Every component is understood (or refused) before the token tables are allocated,
    # so a small file that is refused never costs a vocabulary's memory first.
    pre = _pre_tokenizer(data.get("pre_tokenizer"))
    unescape, strip_first = _decoder_unescapes(data.get("decoder"))
    normalize = _normalizer(data.get("normalizer"))
    vocab = {text: _token_id(index, text) for text, index in vocab.items()}
    added_ids = [_token_id(t.get("id"), t.get("content")) for t in added]
    size = 1 + max(list(vocab.values()) + added_ids + [-1])
    # Real vocabularies have few holes in their id space (GPT-4o: 14); a tiny file naming
    # id 16M must not make this allocate a 16M-entry table.
    if size > len(vocab) + len(added) + MAX_ID_HOLES:
        raise AprError(ErrorCode.MEMORY, "vocabulary ids leave too large a gap",
                       max_id=size - 1, entries=len(vocab) + len(added))
    tokens: List[Optional[str]] = [None] * size
    byte_fallback = bool(model.get("byte_fallback"))
    attrs = [ATTR_NORMAL] * size
    for text, index in vocab.items():
        tokens[index] = text
        if byte_fallback and _BYTE_TOKEN.match(text):
            attrs[index] = ATTR_BYTE
    for token, index in zip(added, added_ids):
        text = token.get("content", "")
        tokens[index] = text
        attr = ATTR_CONTROL if token.get("special") else ATTR_USER_DEFINED
        if token.get("lstrip"):
            attr |= ATTR_LSTRIP
        if token.get("rstrip"):
            attr |= ATTR_RSTRIP
        attrs[index] = attr
    for index, text in enumerate(tokens):
        if text is None:          # holes in the id space render as nothing
            tokens[index] = "[PAD{}]".format(index)
            attrs[index] = ATTR_UNUSED
    ids = {t: i for i, t in enumerate(tokens)}
    norm_types = [n.get("type") for n in _items(data.get("normalizer"), "normalizers")]
    if "Prepend" in norm_types and unescape:
        strip_first = True
    before, after = _wrapping(data.get("post_processor"), ids)

    def named(key: str) -> Optional[int]:
        name = _token_name(config.get(key))
        return ids.get(name) if name is not None else None

    bos = named("bos_token")
    eos = named("eos_token")
    add_bos = bool(before) if "add_bos_token" not in config else bool(config["add_bos_token"])
    add_eos = bool(after) if "add_eos_token" not in config else bool(config["add_eos_token"])
    if bos is None and before:
        bos = before[0]
    if eos is None and after:
        eos = after[-1]
    if eos is None:
        for name in ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"):
            if name in ids:
                eos = ids[name]
                break
    template = config.get("chat_template")
    if isinstance(template, list):      # [{"name": "default", "template": ...}, ...]
        named_templates = {t.get("name"): t.get("template") for t in template
                           if isinstance(t, dict)}
        template = named_templates.get("default") or next(iter(named_templates.values()), None)
    return {
        "tokens": tokens, "attrs": attrs, "merges": model.get("merges") or [],
        "pre": pre["pre"], "ignore_merges": bool(model.get("ignore_merges")),
        "byte_encode": pre["byte_encode"], "escape_spaces": pre["escape_spaces"],
        "prefix_space": pre["prefix_space"], "normalize": normalize,
        "unescape_spaces": unescape,
        "strip_first_space": pre["strip_first_space"] or (strip_first and unescape),
        "bos_id": bos, "eos_id": eos, "unk_id": ids.get(model.get("unk_token") or ""),
        "pad_id": named("pad_token"), "add_bos": add_bos, "add_eos": add_eos,
        "chat_template": template if isinstance(template, str) else None,
        "mark_eog_control": False,
    }
