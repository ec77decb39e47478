"""`apr eval`: perplexity as llama.cpp's llama-perplexity computes it, checked against
llama.cpp's own logits for the same chunks (real SmolLM2-135M Q4_1), plus the scheme on a
hand-made case and the command's gates and errors."""
import json
import math
import this

import numpy as np
import pytest

from apr_core.errors import AprError, ErrorCode
from apr_core.runtime.perplexity import perplexity, token_nll
from cli_util import apr, apr_json

ZEN = "".join(this.d.get(c, c) for c in this.s)
N_CTX = 32


@pytest.fixture(scope="module")
def zen_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "zen.txt"
    path.write_text(ZEN * 2, encoding="utf-8")
    return str(path)


def _reference_nll(logits, targets):
    """log-softmax the plain way (float64), independent of apr_core.runtime.perplexity."""
    out = []
    for row, target in zip(np.asarray(logits, np.float64), targets):
        out.append(math.log(np.exp(row - row.max()).sum()) + row.max() - row[target])
    return np.array(out)


class _Recorder:
    """A stand-in transformer whose logits are fixed numbers: checks the chunking alone."""

    def __init__(self, n_vocab):
        self.seen = []
        self.rng = np.random.RandomState(0)
        self.n_vocab = n_vocab
        outer = self

        class Head:
            def matmul(self, hidden):
                return hidden[:, :outer.n_vocab]
        self.lm_head = Head()

    def new_cache(self, n):
        return None

    def hidden_states(self, ids, cache):
        self.seen.append(list(ids))
        return self.rng.standard_normal((len(ids), self.n_vocab)).astype(np.float32)


def test_scores_the_second_half_of_each_chunk_with_bos_first():
    ids = list(range(1, 11)) * 3                       # 30 tokens: 3 chunks of 8, 6 left over
    model = _Recorder(n_vocab=16)
    result = perplexity(model, ids, 8, bos_id=0)
    assert result["chunks"] == 3 and result["tokens_scored"] == 3 * 3
    assert [chunk[0] for chunk in model.seen] == [0, 0, 0]      # BOS replaces each first token
    assert [chunk[1:] for chunk in model.seen] == [ids[1:8], ids[9:16], ids[17:24]]
    model.rng = np.random.RandomState(0)                       # the same logits again
    want = []
    for chunk in range(3):
        logits = model.rng.standard_normal((8, 16)).astype(np.float32)
        want.extend(_reference_nll(logits[4:7], ids[chunk * 8 + 5:chunk * 8 + 8]))
    assert result["nll"] == pytest.approx(np.mean(want), rel=1e-12)
    assert result["ppl"] == pytest.approx(math.exp(np.mean(want)), rel=1e-12)


def test_token_nll_matches_the_plain_formula():
    logits = np.random.RandomState(1).standard_normal((5, 1000)).astype(np.float32) * 30
    targets = np.array([0, 999, 5, 17, 500])
    np.testing.assert_allclose(token_nll(logits, targets), _reference_nll(logits, targets),
                               rtol=1e-12)


def test_too_short_a_text_is_refused():
    with pytest.raises(AprError) as err:
        perplexity(_Recorder(16), list(range(15)), 8)
    assert err.value.code == ErrorCode.ARGUMENT


# llama.cpp's own perplexity depends on its attention path: these 4 chunks of 32 tokens
# (llama-cpp-python 0.3.36, 2 threads, AVX2 host) give SmolLM2 14.142 with flash attention
# (llama-perplexity's default: common.h's AUTO enables it on the CPU) and 14.490 without
# (llama-cpp-python's default: every attention probability rounded to f16 before the V
# product); Qwen2.5 19.372 and 19.222. apr (f32 attention over an f16 cache, equal to its
# dequantized float32 forward within 2e-5) measured 14.234 and 19.103, inside the span;
# on a Zen 4 host llama.cpp without flash attention gave 14.151 and 19.106. apr must lie
# within PPL_RTOL (relative) of the span of llama.cpp's two paths.
PPL_RTOL = 0.01
# Centered logits among apr's 20 likeliest tokens, every scored row, against llama.cpp with
# flash attention: measured worst 0.670 on SmolLM2 (0.617 on Zen 4; typical rows 0.1-0.4)
# and 0.238 on Qwen2.5 (without flash attention SmolLM2's worst row is 0.90).
# test_llama_cpp_parity.py holds 0.6 on single-token decode steps; llama.cpp's batched
# prompt evaluation quantizes activations to 8 bits the same way and lands just above it.
# A kernel bug moves these logits by units, not tenths.
LOGIT_TOL = 0.7
TOP = 20


def _llama_cpp_logits(path, chunks, flash_attn):
    """llama.cpp's logits for each chunk's scored rows: [chunk][15, n_vocab]."""
    import llama_cpp
    llm = llama_cpp.Llama(path, n_ctx=N_CTX, logits_all=True, verbose=False, n_threads=2,
                          flash_attn=flash_attn)
    try:
        out = []
        for batch in chunks:
            llm.reset()
            llm.eval(batch)
            out.append(np.array(llm.scores[:N_CTX], np.float32)[N_CTX // 2:N_CTX - 1])
        return out
    finally:
        llm.close()


@pytest.mark.real_model
@pytest.mark.oracle
@pytest.mark.native
@pytest.mark.parametrize("name", ["smollm2", "qwen"])
def test_perplexity_matches_llama_cpp(name, request, zen_file):
    """Same tokens, same chunks, same scored positions as llama.cpp's perplexity scheme:
    `apr eval`'s perplexity (the default runtime) lies within llama.cpp's own (its two
    attention paths), and apr's centered logits match llama.cpp's on each scored row."""
    import llama_cpp
    from apr_native.engine import EngineOptions, load_engine
    path = request.getfixturevalue("smollm2_gguf" if name == "smollm2" else "qwen_gguf")
    model = load_engine(path, EngineOptions()).model     # as `apr eval` loads it (KV type too)
    tokenizer = model.tokenizer
    ids = tokenizer.encode(ZEN * 2, add_special=True, parse_special=False)
    code, cli = apr_json("eval", path, "--dataset", zen_file, "--ctx", str(N_CTX),
                         "--chunks", "4")
    assert code == 0 and cli["chunks"] == 4 and cli["tokens"] == len(ids)
    vocab_only = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    assert vocab_only.tokenize((ZEN * 2).encode(), add_bos=tokenizer.add_bos,
                               special=False) == ids
    vocab_only.close()
    first = N_CTX // 2
    chunks = []
    for chunk in range(cli["chunks"]):
        batch = ids[chunk * N_CTX:(chunk + 1) * N_CTX]
        if tokenizer.add_bos:
            batch = [tokenizer.bos_id] + batch[1:]           # llama-perplexity's BOS
        chunks.append(batch)
    ours_nll, worst = [], 0.0
    theirs = {flash: _llama_cpp_logits(path, chunks, flash) for flash in (True, False)}
    theirs_nll = {flash: [] for flash in theirs}
    for index, batch in enumerate(chunks):
        hidden = model.transformer.hidden_states(batch, model.transformer.new_cache(N_CTX))
        ours = model.transformer.lm_head.matmul(hidden[first:N_CTX - 1])  # [15, n_vocab]
        targets = batch[first + 1:]
        ours_nll.extend(_reference_nll(ours, targets))
        for flash, rows in theirs.items():
            theirs_nll[flash].extend(_reference_nll(rows[index], targets))
        for mine, ref in zip(ours, theirs[True][index]):
            top = np.argsort(mine)[-TOP:]
            moved = ref[top] - mine[top]
            worst = max(worst, float(np.abs(moved - moved.mean()).max()))
    ppl_ours = math.exp(np.mean(ours_nll))
    ppl_theirs = sorted(math.exp(np.mean(nll)) for nll in theirs_nll.values())
    print("{}: apr PPL {:.4f} (CLI {:.4f}), llama.cpp PPL {:.4f} (flash attention) / {:.4f} "
          "(without); worst centered logit {:.3f}".format(
              name, ppl_ours, cli["ppl"], math.exp(np.mean(theirs_nll[True])),
              math.exp(np.mean(theirs_nll[False])), worst))
    assert cli["tokens_scored"] == len(ours_nll)
    assert cli["nll"] == pytest.approx(np.mean(ours_nll), rel=1e-4)
    assert ppl_theirs[0] * (1 - PPL_RTOL) <= cli["ppl"] <= ppl_theirs[1] * (1 + PPL_RTOL)
    assert worst <= LOGIT_TOL


@pytest.mark.real_model
def test_gate_and_errors(smollm2_gguf, zen_file, tmp_path):
    code, result = apr_json("eval", smollm2_gguf, "--dataset", zen_file, "--ctx", "32",
                            "--chunks", "1", "--max-ppl", "1.0")
    assert code == 5 and result["pass"] is False and result["chunks"] == 1
    code, out, err = apr("eval", smollm2_gguf, "--dataset", str(tmp_path / "wikitext"))
    assert code == 3 and "E007" in err and "local text file" in err
    short = tmp_path / "short.txt"
    short.write_text("too short")
    code, out, err = apr("eval", smollm2_gguf, "--dataset", str(short), "--ctx", "32")
    assert code != 0 and "too short" in err
