"""apr_core.refs: THE parser of model references (hf://, URLs) and the :QUANT pick."""
import pytest

from apr_core.errors import AprError
from apr_core.refs import ModelRef, parse_reference, pick_gguf


@pytest.mark.parametrize("text,expected", [
    ("hf://org/repo", ("hf", "org/repo", "", "", "")),
    ("hf://org/repo@v1.0", ("hf", "org/repo", "", "v1.0", "")),
    ("hf://org/repo:Q4_K_M", ("hf", "org/repo", "", "", "Q4_K_M")),
    ("hf://org/repo:q8_0@abc", ("hf", "org/repo", "", "abc", "q8_0")),
    ("hf://org/repo/sub/model.gguf@refs/pr/1", ("hf", "org/repo", "sub/model.gguf",
                                                "refs/pr/1", "")),
    ("https://example.com/m.gguf", ("url", "", "", "", "")),
])
def test_parse(text, expected):
    ref = parse_reference(text)
    assert (ref.kind, ref.repo, ref.path, ref.revision, ref.quant) == expected
    assert ref.text == text


@pytest.mark.parametrize("text", ["demo", "./m.gguf", "/abs/m.apr", "hf_model.gguf"])
def test_not_a_reference(text):
    assert parse_reference(text) is None


@pytest.mark.parametrize("text", ["hf://org", "hf://org/../x", "hf://org/repo/../etc",
                                  "hf://org/repo//x", "hf://org/repo:Q4 K", "hf://org/re po",
                                  "hf://org/repo@", "hf://org/repo@../x", "http://",
                                  "https://host/a b"])
def test_malformed_is_e011(text):
    with pytest.raises(AprError) as caught:
        parse_reference(text)
    assert caught.value.code.name == "E011"


FILES = ["m-Q4_K_M.gguf", "m-Q4_K.gguf", "M.q8_0.gguf", "m-Q5_0-00002-of-00002.gguf",
         "m-Q5_0-00001-of-00002.gguf", "README.md"]


@pytest.mark.parametrize("quant,picked", [
    ("Q4_K_M", ["m-Q4_K_M.gguf"]), ("q4_k", ["m-Q4_K.gguf"]), ("Q8_0", ["M.q8_0.gguf"]),
    ("q5_0", ["m-Q5_0-00001-of-00002.gguf", "m-Q5_0-00002-of-00002.gguf"]),
])
def test_pick_by_quant_tag(quant, picked):
    assert pick_gguf(ModelRef("hf", "hf://o/r:" + quant, "o/r", quant=quant), FILES) == picked


def test_pick_missing_or_ambiguous_lists_the_repo():
    for ref in (ModelRef("hf", "hf://o/r:IQ2_XS", "o/r", quant="IQ2_XS"),
                ModelRef("hf", "hf://o/r", "o/r")):
        with pytest.raises(AprError) as caught:
            pick_gguf(ref, FILES)
        assert caught.value.code.name == "E011"
        assert "m-Q4_K_M.gguf" in caught.value.context["available"]
    assert pick_gguf(ModelRef("hf", "hf://o/r", "o/r"), ["only.gguf", "x.md"]) == ["only.gguf"]


def test_resolve_url():
    ref = parse_reference("hf://org/repo@refs/pr/1")
    assert ref.resolve_url("a b.gguf", "https://hub.example/") == \
        "https://hub.example/org/repo/resolve/refs%2Fpr%2F1/a%20b.gguf"
