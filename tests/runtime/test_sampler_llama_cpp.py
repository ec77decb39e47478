"""apr's sampler stages against llama.cpp's own (llama-cpp-python's low-level sampler
API on the same logits and history; the vocabulary for DRY's sequence breakers is
SmolLM2's): penalties, DRY, top-k, top-p, min-p, typical, temperature and XTC (at
probability 1, where it is deterministic) give the same surviving tokens and logits;
Mirostat v1's first draw has the same distribution (chi-square over many seeds)."""
import ctypes
import math

import numpy as np
import pytest

from apr_core.runtime.dry import breaker_ids
from apr_core.runtime.sampling import Sampler, SamplerConfig
from requires import needs

pytestmark = [pytest.mark.native, pytest.mark.oracle, pytest.mark.real_model,
              needs("llama_cpp")]

N = 49152                                   # SmolLM2's vocabulary


@pytest.fixture(scope="module")
def llama(smollm2_gguf):
    import llama_cpp
    llm = llama_cpp.Llama(smollm2_gguf, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    from apr_core.runtime.text_model import TextModel
    tokenizer = TextModel.load(smollm2_gguf).tokenizer
    return llama_cpp, vocab, llm, tokenizer


def run_llama(llama_cpp, sampler, logits, history=()):
    """llama.cpp's logits after `sampler`: -inf where it dropped a token."""
    for token in history:
        llama_cpp.llama_sampler_accept(sampler, int(token))
    data = (llama_cpp.llama_token_data * len(logits))(
        *[llama_cpp.llama_token_data(i, float(v), 0.0) for i, v in enumerate(logits)])
    array = llama_cpp.llama_token_data_array(data, len(logits), -1, False)
    llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
    out = np.full(len(logits), -np.inf)
    for i in range(array.size):
        out[array.data[i].id] = array.data[i].logit
    llama_cpp.llama_sampler_free(sampler)
    return out


def apr_logits(config, logits, history=(), breakers=frozenset()):
    """apr's chain output as logits (-inf where dropped), before the draw."""
    sampler = Sampler(config, breakers)
    z = sampler._penalised(logits, history)
    if config.temperature > 0:
        probs = sampler._filtered_probs(z)
        with np.errstate(divide="ignore"):
            return np.where(probs > 0, z / config.temperature, -np.inf)
    return z


def same(ours, theirs):
    kept = np.isfinite(theirs)
    assert np.array_equal(np.isfinite(ours), kept)
    assert ours[kept] == pytest.approx(theirs[kept], abs=2e-5, rel=2e-6)


@pytest.fixture(scope="module")
def logits():
    rng = np.random.RandomState(0)
    return (rng.standard_normal(N) * 3.0).astype(np.float32).astype(np.float64)


def history_with_repeats(tokenizer, n=300, text="The cat sat on the mat. The cat sat on the"):
    rng = np.random.RandomState(1)
    ids = tokenizer.encode(text, add_special=False, parse_special=False)
    noise = rng.randint(0, N, size=n).tolist()
    return noise[:100] + ids + noise[100:200] + ids


def test_penalties(llama, logits):
    llama_cpp, _, _, tok = llama
    history = history_with_repeats(tok)
    ours = apr_logits(SamplerConfig(temperature=0.0, repetition_penalty=1.3,
                                    frequency_penalty=0.2, presence_penalty=0.4,
                                    penalty_last_n=64), logits, history)
    theirs = run_llama(llama_cpp, llama_cpp.llama_sampler_init_penalties(
        N, 64, 1.3, 0.2, 0.4),
                       logits, history)
    same(ours, theirs)


@pytest.mark.parametrize("allowed,last_n,text", [
    (2, 256, "The cat sat on the mat. The cat sat on the"), (1, 40, "x = f(a, b) + g(c)"),
    (3, 1024, "The cat sat on the mat. The cat sat on the"),
    (1, 256, "one two three: one two three")])     # the breaker ":" followed the repeat
def test_dry(llama, logits, allowed, last_n, text):
    llama_cpp, vocab, _, tok = llama
    history = history_with_repeats(tok, text=text)
    breakers = ("\n", ":", "\"", "*", ".")
    raw = [b.encode() for b in breakers]
    array = (ctypes.c_char_p * len(raw))(*raw)
    theirs = run_llama(llama_cpp, llama_cpp.llama_sampler_init_dry(
        vocab, 0.8, 1.75, allowed, last_n, array, len(raw)), logits, history)
    config = SamplerConfig(temperature=0.0, dry_multiplier=0.8, dry_base=1.75,
                           dry_allowed_length=allowed, dry_penalty_last_n=last_n,
                           dry_sequence_breakers=breakers)
    ours = apr_logits(config, logits, history, breaker_ids(tok, breakers))
    assert (ours != logits).any()                                 # something penalised
    same(ours, theirs)


@pytest.mark.parametrize("stage", ["top_k", "top_p", "min_p", "typical", "temp", "xtc"])
def test_truncation_and_temperature(llama, logits, stage):
    llama_cpp = llama[0]
    # 2,048 candidates (the stages need no vocabulary), flattened so that many survive:
    # cumulative sums over them stay far from a cut in float32 as in float64
    z = logits[:2048] / 3.0
    make, config = {
        "top_k": (lambda: llama_cpp.llama_sampler_init_top_k(40),
                  SamplerConfig(temperature=1.0, top_k=40)),
        "top_p": (lambda: llama_cpp.llama_sampler_init_top_p(0.9, 1),
                  SamplerConfig(temperature=1.0, top_p=0.9)),
        "min_p": (lambda: llama_cpp.llama_sampler_init_min_p(0.05, 1),
                  SamplerConfig(temperature=1.0, min_p=0.05)),
        "typical": (lambda: llama_cpp.llama_sampler_init_typical(0.9, 1),
                    SamplerConfig(temperature=1.0, typical_p=0.9)),
        "temp": (lambda: llama_cpp.llama_sampler_init_temp(0.7),
                 SamplerConfig(temperature=0.7)),
        "xtc": (lambda: llama_cpp.llama_sampler_init_xtc(1.0, 0.01, 1, 0),
                SamplerConfig(temperature=1.0, xtc_probability=1.0, xtc_threshold=0.01)),
    }[stage]
    if stage == "xtc":
        z = logits[:2048].copy()
        z[:5] += 8.0                                  # a few tokens above the threshold
    theirs = run_llama(llama_cpp, make(), z)
    ours = apr_logits(config, z)
    if stage == "xtc":
        assert np.isneginf(ours).sum() >= 2           # top choices were removed
    same(ours, theirs)


def test_mirostat_v1_first_draw_has_llama_cpps_distribution(llama):
    llama_cpp = llama[0]
    rng = np.random.RandomState(3)
    z = np.sort(rng.standard_normal(2000) * 2.0)[::-1].copy()     # Zipf-like tail
    draws = 3000
    theirs = np.zeros(z.size)
    for seed in range(draws):
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(
            chain, llama_cpp.llama_sampler_init_mirostat(z.size, seed, 5.0, 0.1, 100))
        data = (llama_cpp.llama_token_data * z.size)(
            *[llama_cpp.llama_token_data(i, float(v), 0.0) for i, v in enumerate(z)])
        array = llama_cpp.llama_token_data_array(data, z.size, -1, False)
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(array))
        theirs[array.data[array.selected].id] += 1
        llama_cpp.llama_sampler_free(chain)
    ours = np.zeros(z.size)
    for seed in range(draws):
        ours[Sampler(SamplerConfig(temperature=1.0, mirostat=1, seed=seed))(z)] += 1
    support = (theirs + ours) > 0
    assert support.sum() > 3                          # a real choice, not one token
    # two-sample chi-square over the cells both used, small cells pooled
    a, b = theirs[support], ours[support]
    big = (a + b) >= 10
    a = np.append(a[big], a[~big].sum())
    b = np.append(b[big], b[~big].sum())
    keep = (a + b) > 0
    stat = float((((a - b) ** 2) / (a + b))[keep].sum())
    df = int(keep.sum()) - 1
    bound = df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3
    assert stat < bound, (stat, df)
