"""BPE merge ranks: THE table `merge_word` looks pairs up in, built from a merge list.

A pair (left, right) is looked up as the one string `left + sep + right`. For the usual
list of "left right" strings (GGUF `tokenizer.ggml.merges`, old tokenizer.json files) the
separator is the space and the keys are the merge strings themselves, so the table is one
`dict(zip(...))` over them: no string is split and no tuple built at load (for a 150k-merge
vocabulary that was the slowest step of loading a tokenizer). That is exact only while no
merge holds two spaces (then "a b c" would also answer the pair ("a b", "c")); otherwise,
and for merges given as pairs, each entry is split as before and joined with a separator
that occurs in no part.

Splitting rule (llama.cpp's): "a b" splits at the first space after position 0, so a
merge starting with a space (" a b" -> (" a", "b")) keeps it on its left part; an entry
without such a space never matches. The first rule for a pair wins (lowest rank).
"""
from __future__ import annotations

import re
from typing import Any, List, Sequence, Tuple

from ..errors import AprError, ErrorCode

_JOIN = "\0"                          # never inside a real merge; checked below
_TWO_SPACES = "[ ][^ \0]*[ ]"        # (compiled on first use: re caches it)
# separators tried, in order, when a part holds a space
_SEPARATORS = ("\0", "\x01", "\x1f", "\ufffe", "\U0010fffe")


class PairRanks(dict):
    """`left + sep + right` -> rank (a dict: lookups stay C-fast); `key(l, r)` builds one."""

    def __init__(self, table: Any = (), sep: str = " ") -> None:
        super().__init__(table)
        self.sep = sep

    def key(self, left: str, right: str) -> str:
        return left + self.sep + right


def merge_ranks(merges: Sequence[Any]) -> PairRanks:
    """The rank table of `merges` ("a b" strings, [a, b] pairs, or a mix of both)."""
    if not isinstance(merges, list):
        merges = list(merges)
    count = len(merges)
    try:
        joined = _JOIN.join(merges)
    except TypeError:                   # pairs, or a mix of both forms
        joined = None
    if joined is not None and joined.count(_JOIN) == count - 1 \
            and re.search(_TWO_SPACES, joined) is None:
        # reversed: the first rule for a pair wins
        return PairRanks(zip(reversed(merges), range(count - 1, -1, -1)))
    return _split_ranks(merges)


def _split_ranks(merges: List[Any]) -> PairRanks:
    keys = [_merge_key(m, rank) for rank, m in enumerate(merges)]
    parts = "".join(left + right for left, right in keys)
    sep = next((s for s in _SEPARATORS if s not in parts), None)
    if sep is None:
        raise AprError(ErrorCode.UNSUPPORTED, "BPE merges use every separator candidate",
                       candidates=[hex(ord(s)) for s in _SEPARATORS])
    table = PairRanks(sep=sep)
    for rank in range(len(keys) - 1, -1, -1):
        left, right = keys[rank]
        if left and right:              # an entry without a separator never matches
            table[left + sep + right] = rank
    return table


def split_merge(merge: str) -> Tuple[str, str]:
    """("a", "b") for "a b": the first space after position 0; ("", "") when none."""
    cut = merge.find(" ", 1)
    return (merge[:cut], merge[cut + 1:]) if cut > 0 else ("", "")


def _merge_key(merge: Any, rank: int) -> Tuple[str, str]:
    if isinstance(merge, str):
        return split_merge(merge)
    if (isinstance(merge, (list, tuple)) and len(merge) == 2
            and all(isinstance(part, str) for part in merge)):
        return (merge[0], merge[1])
    raise AprError(ErrorCode.FORMAT, "bad BPE merge entry", rank=rank, entry=repr(merge)[:80])


__all__ = ["PairRanks", "merge_ranks", "split_merge"]
