"""Pre-tokenizer: split text into words before BPE, with only the standard library.

Tokenizers describe their word split with regexes written for engines that know Unicode
properties (`\\p{L}`, `\\p{N}` ...). Python's `re` does not, so `translate()` rewrites such a
pattern into plain `re` syntax by expanding every property into an explicit character class
built from `unicodedata` (computed once, lazily, for the whole code space). `\\s` becomes the
Unicode White_Space set (the set llama.cpp uses, which unlike `str.isspace` excludes
U+001C..U+001F), `$` becomes end-of-segment, possessive quantifiers become greedy ones.

A pre-tokenizer is a *sequence* of patterns applied the way llama.cpp's
`unicode_regex_split` applies them: each pattern splits every segment left by the previous
one into its matches and the gaps between them, so no character is ever dropped.
`PRE_PATTERNS` holds the families, `GGUF_PRE` maps `tokenizer.ggml.pre` names onto them.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import AprError, ErrorCode

# Unicode White_Space (PropList.txt): what `\s` means here, inside and outside classes.
WHITESPACE_CLASS = "\\t\\n\\x0b\\x0c\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"

# Planes 0-3 hold every assigned letter, mark, number, punctuation and symbol; plane 14
# holds tags and variation selectors (marks). Planes 15-16 are private use only, so the
# scan skips them: 266k lookups instead of 1.1M keeps the first use cheap in the browser.
_SCAN = (range(0x0, 0x40000), range(0xE0000, 0xE1000))

_category_ranges: Optional[Dict[str, List[Tuple[int, int]]]] = None
_class_cache: Dict[str, str] = {}


# The runs of `scan_category_ranges`, precomputed for one Unicode version by
# scripts/gen_unicode_categories.py (tests/text/test_unicode_categories.py keeps it equal
# to a fresh scan): the scan is 266k `unicodedata.category` calls, ~0.2 s of every
# process that loads a BPE tokenizer. Another Python's Unicode version scans instead.
CATEGORY_TABLE = "data/unicode_categories.json"


def scan_category_ranges() -> Dict[str, List[Tuple[int, int]]]:
    """Code point runs per two-letter general category ("Lu", "Nd", ...) of this Python's
    `unicodedata`, over the `_SCAN` planes."""
    table: Dict[str, List[Tuple[int, int]]] = {}
    category = unicodedata.category
    for block in _SCAN:
        run_cat, run_start = None, block.start
        for cp in block:
            cat = category(chr(cp))
            if cat != run_cat:
                if run_cat is not None:
                    table.setdefault(run_cat, []).append((run_start, cp - 1))
                run_cat, run_start = cat, cp
        table.setdefault(run_cat, []).append((run_start, block.stop - 1))
    return table


def packaged_category_ranges() -> Optional[Dict[str, List[Tuple[int, int]]]]:
    """`CATEGORY_TABLE`'s runs when it was made for this Python's Unicode version."""
    import json
    from ..package_data import read
    try:
        data = read(CATEGORY_TABLE)
    except OSError:
        return None
    if data is None:
        return None
    packed = json.loads(data.decode("utf-8"))
    if packed.get("unidata_version") != unicodedata.unidata_version or \
            packed.get("scan") != [[b.start, b.stop] for b in _SCAN]:
        return None
    return {cat: list(zip(flat[0::2], flat[1::2])) for cat, flat in packed["runs"].items()}


def _two_letter_ranges() -> Dict[str, List[Tuple[int, int]]]:
    """Code point runs per two-letter general category, once per process."""
    global _category_ranges
    if _category_ranges is None:
        _category_ranges = packaged_category_ranges() or scan_category_ranges()
    return _category_ranges


def _escape(cp: int) -> str:
    return "\\u%04x" % cp if cp < 0x10000 else "\\U%08x" % cp


def category_class(name: str) -> str:
    """Body of a `re` character class (no brackets) for a property such as "L", "Lu", "N".

    One-letter names take the union of their two-letter categories.
    """
    body = _class_cache.get(name)
    if body is not None:
        return body
    table = _two_letter_ranges()
    names = [c for c in table if c == name or (len(name) == 1 and c[0] == name)]
    if not names or len(name) > 2:
        raise AprError(ErrorCode.UNSUPPORTED, "unknown Unicode property in tokenizer regex",
                       property=name)
    ranges = sorted(r for c in names for r in table[c])
    merged: List[List[int]] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    body = "".join(_escape(lo) if lo == hi else _escape(lo) + "-" + _escape(hi)
                   for lo, hi in merged)
    _class_cache[name] = body
    return body


# Escapes with a class meaning, as (inside-a-class body, negated?) producers.
_CLASS_ESCAPES = {
    "s": lambda: (WHITESPACE_CLASS, False),
    "S": lambda: (WHITESPACE_CLASS, True),
    "d": lambda: (category_class("Nd"), False),
    "D": lambda: (category_class("Nd"), True),
    "w": lambda: (category_class("L") + category_class("M") + category_class("Nd")
                  + category_class("Pc"), False),
    "W": lambda: (category_class("L") + category_class("M") + category_class("Nd")
                  + category_class("Pc"), True),
}


def translate(pattern: str) -> str:
    """Rewrite a PCRE/Oniguruma-style tokenizer regex into Python `re` syntax."""
    out: List[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        if ch == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt in "pP" and i + 2 < n and pattern[i + 2] == "{":
                end = pattern.find("}", i + 3)
                if end < 0:
                    raise AprError(ErrorCode.FORMAT, "unterminated \\p{} in tokenizer regex",
                                   pattern=pattern)
                body, negated = category_class(pattern[i + 3:end]), nxt == "P"
                i = end + 1
            elif nxt in _CLASS_ESCAPES:
                body, negated = _CLASS_ESCAPES[nxt]()
                i += 2
            else:
                out.append(pattern[i:i + 2])
                i += 2
                continue
            if in_class and negated:
                raise AprError(ErrorCode.UNSUPPORTED, "negated class escape inside [] in "
                               "tokenizer regex", pattern=pattern)
            out.append(body if in_class else ("[^" if negated else "[") + body + "]")
            continue
        if in_class:
            if ch == "]" and out[-1] not in ("[", "[^"):
                in_class = False
            elif ch == "[":
                ch = "\\["      # a literal here; Python would warn about a nested set
            out.append(ch)
        elif ch == "[":
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^")
                i += 2
                if i < n and pattern[i] == "]":   # "[^]...]": the ] is a literal
                    out.append("\\]")
                    i += 1
                continue
            out.append("[")
        elif ch == "$":
            out.append("\\Z")   # end of the segment, as in ECMAScript (no multiline)
        elif ch in "+?*}" and i + 1 < n and pattern[i + 1] == "+":
            out.append(ch)      # possessive quantifier -> greedy (re before 3.11 has none)
            i += 1
        else:
            out.append(ch)
        i += 1
    return "".join(out)


_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
_LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
_GPT4O = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + "+" + _CONTRACTIONS + "?"
          r"|[^\r\n\p{L}\p{N}]?" + _UPPER + "+" + _LOWER + "*" + _CONTRACTIONS + "?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + "+"
           r"|[^\r\n\p{L}\p{N}]?" + _UPPER + "+" + _LOWER + "*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# DeepSeek-LLM's word class from its tokenizer.json: cased letters of the Latin, Greek,
# Cyrillic, Armenian, Georgian, Cherokee ... scripts, as code point ranges.
_DEEPSEEK_LETTERS = "".join(
    _escape(int(lo, 16)) + ("-" + _escape(int(hi, 16)) if hi else "")
    for lo, _, hi in (r.partition("-") for r in (
        "41-5a 61-7a b5 c0-d6 d8-f6 f8-1ba 1bc-1bf 1c4-293 295-2af 370-373 376 377 37b-37d "
        "37f 386 388-38a 38c 38e-3a1 3a3-3f5 3f7-481 48a-52f 531-556 10a0-10c5 13a0-13f5 "
        "13f8-13fd 1c90-1cba 1cbd-1cbf 1d00-1d2b 1d6b-1d77 1d79-1d9a 1e00-1f15 1f18-1f1d "
        "1f20-1f45 1f48-1f4d 1f50-1f57 1f59 1f5b 1f5d 1f5f-1f7d 1f80-1fb4 1fb6-1fbc 1fbe "
        "1fc2-1fc4 1fc6-1fcc 1fd0-1fd3 1fd6-1fdb 1fe0-1fec 1ff2-1ff4 1ff6-1ffc 2102 2107 "
        "210a-2113 2115 2119-211d 2124 2126 2128 212a-212d 212f-2134 2139 213c-213f "
        "2145-2149 214e 2183 2184 2c00-2c7b 2c7e-2ce4 2ceb-2cee 2cf2 2cf3 a640-a66d a680-a69b "
        "a722-a76f a771-a787 a78b-a78e ab70-abbf fb00-fb06 fb13-fb17 ff21-ff3a ff41-ff5a "
        "10400-1044f 104b0-104d3 104d8-104fb 10c80-10cb2 10cc0-10cf2 118a0-118df 1e900-1e943"
    ).split()))

# Family -> the patterns applied in turn (llama.cpp's `llm_tokenizer_bpe` regex lists).
PRE_PATTERNS: Dict[str, Tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "gpt2": (_GPT2,),
    "llama3": (_LLAMA3,),
    "qwen2": (_QWEN2,),
    "qwen35": (_QWEN35,),
    "starcoder": (r"\p{N}", _GPT2),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"),
    "deepseek-coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+",
                       r"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}"),
    "deepseek-llm": (r"[\r\n]", r"\s?[" + _DEEPSEEK_LETTERS + r"]+",
                     r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                     r"\s+$", r"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}+"),
    "deepseek-v3": (r"\p{N}{1,3}", r"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                    r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"
                    r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "bloom": (r" ?[^(\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+",),
    "gpt4o": (_GPT4O,),
    "tekken": (_TEKKEN,),
    "newlines": (r"[^\n]+|[\n]+",),
    "whole": (),
}

# tokenizer.ggml.pre -> (family, ignore_merges, add_bos default), as llama.cpp's vocab loader
# sets them. ignore_merges: a word that is itself a token is emitted whole, without merges.
GGUF_PRE: Dict[str, Tuple[str, bool, bool]] = {}
for _names, _family, _ignore, _bos in (
        ("default", "default", False, False),
        ("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
         "llama3", True, True),
        ("dbrx smaug-bpe chatglm-bpe", "llama3", False, False),
        ("glm4 glm5", "llama3", True, False),
        ("qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2",
         "qwen2", False, False),
        ("qwen35", "qwen35", False, False),
        ("gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum "
         "modern-bert mpt olmo jais trillion granite-docling exaone4 jina-v1-en jina-v2-code "
         "roberta-bpe", "gpt2", False, False),
        ("starcoder refact command-r smollm codeshell exaone minerva-7b mellum2",
         "starcoder", False, False),
        ("falcon", "falcon", False, False),
        ("deepseek-coder", "deepseek-coder", False, False),
        ("deepseek-llm", "deepseek-llm", False, False),
        ("deepseek-v3 hunyuan-dense joyai-llm hy_v4", "deepseek-v3", False, False),
        ("bloom poro-chat gpt3-finnish", "bloom", False, False),
        ("gpt-4o llama4 kanana2 talkie minimax-m2", "gpt4o", False, False),
        ("tekken", "tekken", True, True),
        ("gemma4", "newlines", False, True)):
    for _name in _names.split():
        GGUF_PRE[_name] = (_family, _ignore, _bos)


def gguf_pre(name: Optional[str]) -> Tuple[str, bool, bool]:
    """(family, ignore_merges, add_bos) for a `tokenizer.ggml.pre`; missing means "default"."""
    found = GGUF_PRE.get(name or "default")
    if found is None:
        raise AprError(ErrorCode.UNSUPPORTED, "unsupported pre-tokenizer type",
                       pre=name, supported=", ".join(sorted(GGUF_PRE)))
    return found


_BEHAVIORS = ("isolated", "removed", "merged_with_previous", "merged_with_next", "contiguous")
Step = Tuple[str, str, bool]


class PreTokenizer:
    """Splits text into words with a sequence of regex steps (see the module docstring).

    A step is a pattern string (its matches and the gaps between them become pieces) or a
    `(pattern, behavior, invert)` triple with HF `Split` semantics: behavior "isolated",
    "removed" (drop matches), "merged_with_previous" / "merged_with_next" (a match joins
    the neighbouring gap) or "contiguous" (adjacent matches join); invert swaps the roles
    of matches and gaps.
    """

    def __init__(self, steps: Sequence[object]) -> None:
        self.steps: List[Step] = []
        for step in steps:
            if isinstance(step, str):
                step = (step, "isolated", False)
            pattern, behavior, invert = step  # type: ignore[misc]
            if behavior not in _BEHAVIORS:
                raise AprError(ErrorCode.UNSUPPORTED, "unsupported split behavior",
                               behavior=behavior)
            self.steps.append((pattern, behavior, bool(invert)))
        try:
            self._compiled = [(re.compile(translate(p), re.ASCII), b, inv)
                              for p, b, inv in self.steps]
        except re.error as exc:
            raise AprError(ErrorCode.UNSUPPORTED, "tokenizer regex not supported by re",
                           error=str(exc)) from exc

    @classmethod
    def family(cls, name: str) -> "PreTokenizer":
        """The pre-tokenizer of a `PRE_PATTERNS` family, compiled once per process."""
        found = _families.get(name)
        if found is None:
            if name not in PRE_PATTERNS:
                raise AprError(ErrorCode.UNSUPPORTED, "unknown pre-tokenizer family",
                               family=name)
            found = _families[name] = cls(PRE_PATTERNS[name])
        return found

    def split(self, text: str) -> List[str]:
        """The words of `text`, in order (their concatenation is `text` unless removed)."""
        if not text:
            return []
        spans = [(0, len(text))]
        for pattern, behavior, invert in self._compiled:
            finditer = pattern.finditer
            pieces: List[Tuple[int, int]] = []
            for start, end in spans:
                marks: List[Tuple[int, int, bool]] = []
                pos = start
                for match in finditer(text, start, end):
                    m_start, m_end = match.span()
                    if m_start > pos:
                        marks.append((pos, m_start, invert))     # the gap before a match
                    if m_end > m_start:
                        marks.append((m_start, m_end, not invert))
                    pos = m_end
                if pos < end:
                    marks.append((pos, end, invert))
                if behavior == "isolated":
                    pieces.extend((s, e) for s, e, _ in marks)
                else:
                    pieces.extend(_apply_behavior(marks, behavior))
            spans = pieces
        return [text[s:e] for s, e in spans]


def _apply_behavior(marks: List[Tuple[int, int, bool]], behavior: str) -> List[Tuple[int, int]]:
    """HF `SplitDelimiterBehavior` over (start, end, is_match) pieces of one segment."""
    if behavior == "removed":
        return [(s, e) for s, e, is_match in marks if not is_match]
    out: List[List[int]] = []
    if behavior == "merged_with_next":
        following_match = False
        for s, e, is_match in reversed(marks):
            if is_match and not following_match and out:
                out[-1][0] = s
            else:
                out.append([s, e])
            following_match = is_match
        out.reverse()
    else:
        previous_match = False
        for s, e, is_match in marks:
            joins = previous_match if behavior == "contiguous" else not previous_match
            if is_match and joins and out:
                out[-1][1] = e
            else:
                out.append([s, e])
            previous_match = is_match
    return [(s, e) for s, e in out]


_families: Dict[str, PreTokenizer] = {}
