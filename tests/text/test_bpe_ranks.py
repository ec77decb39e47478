"""BPE merge ranks (`apr_core.text.bpe_ranks`): the joined-key table answers every pair
exactly as splitting each merge into a (left, right) tuple does (llama.cpp's rule), on the
fast path (merge strings as keys) and on the split path (two spaces, pairs, mixed)."""
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.text.bpe_ranks import PairRanks, merge_ranks, split_merge


def tuple_ranks(merges):
    """The reference: each merge split into a tuple, the first rule for a pair wins."""
    ranks = {}
    for rank, merge in enumerate(merges):
        pair = split_merge(merge) if isinstance(merge, str) else tuple(merge)
        ranks.setdefault(pair, rank)
    return ranks


def candidate_pairs(merges):
    """Every (left, right) any merge could be split into, plus swapped and joined parts."""
    texts = set()
    for merge in merges:
        whole = merge if isinstance(merge, str) else " ".join(merge)
        texts.add(whole)
        if not isinstance(merge, str):
            texts.update(merge)
        for cut in range(len(whole) + 1):
            texts.update((whole[:cut], whole[cut:], whole[:cut].strip(), whole[cut:].strip()))
    texts.discard("")             # a symbol is never empty
    return [(a, b) for a in texts for b in texts]


def assert_same(merges):
    table = merge_ranks(merges)
    reference = tuple_ranks(merges)
    for left, right in candidate_pairs(merges):
        assert table.get(table.key(left, right)) == reference.get((left, right)), (left, right)
    return table


def test_gguf_style_merges_use_the_strings_themselves():
    table = assert_same(["a b", "ab c", "a b", "x", "", "c ", " d"])
    assert table.sep == " " and table["a b"] == 0        # the first rule wins


def test_two_spaces_fall_back_to_split_keys():
    merges = ["a b c", "a b", "a  b", "b c", " a b"]
    table = assert_same(merges)
    assert table.sep != " "
    assert table.get(table.key("a b", "c")) is None       # "a b c" is ("a", "b c") only
    assert table.get(table.key("a", "b c")) == 0


def test_pairs_and_mixed_lists():
    assert_same([["a b", "c"], ["a", "b"], "b c", ("x", "y z")])


def test_bad_entries_are_format_errors():
    with pytest.raises(AprError) as info:
        merge_ranks(["a b", 3])
    assert info.value.code is ErrorCode.FORMAT and info.value.context["rank"] == 1


def test_pair_ranks_is_a_plain_lookup_table():
    table = PairRanks({"a b": 0})
    assert table.sep == " " and table.key("a", "b") == "a b" and table.get("a b") == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.text(alphabet="ab \0\u0120", max_size=6),
    st.tuples(st.text(alphabet="ab \u0120", min_size=1, max_size=3),
              st.text(alphabet="ab \u0120", min_size=1, max_size=3))), max_size=12))
def test_any_merge_list_answers_like_the_tuple_table(merges):
    assert_same(merges)
