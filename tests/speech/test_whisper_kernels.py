"""Whisper on the engine's kernels (apr_native.speech_native with backend numba): the files
`apr convert --quantize Q8_0 / Q5_0` write keep their projections, the logits' token
embedding included, at their stored size as Linears on the backend, and transcribe
word-equal to faster-whisper (the oracle, on the CTranslate2 directory the APR file was
imported from); one and two kernel threads give the same tokens. The F16 file itself natively
(decoder weights read as float16) too."""
from __future__ import annotations

import pytest

from apr_core.speech.transcribe import transcribe
from speech_util import UTTERANCES, espeak, faster_whisper_model, whisper_apr, words

pytestmark = [pytest.mark.native, pytest.mark.real_model]

QUANTS = ("Q8_0", "Q5_0")


@pytest.fixture(scope="module")
def files(whisper_base_dir, tmp_path_factory):
    from apr_native.cli.main import main
    folder = tmp_path_factory.mktemp("whisper_kernels")
    source = whisper_apr(whisper_base_dir, folder)
    out = {"F16": source}
    for quant in QUANTS:
        out[quant] = str(folder / "whisper-{}.apr".format(quant.lower()))
        assert main(["convert", source, "--quantize", quant, "-o", out[quant], "--json"]) == 0
    return out


@pytest.fixture(scope="module")
def audio():
    return espeak(UTTERANCES[2])


@pytest.fixture(scope="module")
def theirs(whisper_base_dir, audio):
    oracle = faster_whisper_model(whisper_base_dir)
    segments, _ = oracle.transcribe(audio, vad_filter=False, beam_size=1, temperature=0.0)
    return " ".join(s.text for s in segments)


# (quant, threads) -> (model, transcript): each decoded once for the module (CI time)
_RUNS = {}


def _run(files, audio, quant, threads):
    if (quant, threads) not in _RUNS:
        pytest.importorskip("numba")
        from apr_native.speech_native import load_native_whisper
        model = load_native_whisper(files[quant], backend="numba", threads=threads)
        _RUNS[quant, threads] = model, transcribe(model, audio, beam_size=1, temperature=0.0)
    return _RUNS[quant, threads]


@pytest.mark.parametrize("quant", QUANTS)
def test_quantized_whisper_on_kernels_equals_faster_whisper(files, theirs, audio, quant):
    from apr_core.formats.open import open_model
    model, ours = _run(files, audio, quant, threads=2)
    stored = open_model(files[quant]).tensors
    linears = model.net.linears
    assert "decoder.token_embedding" in linears         # lookup and logits over its blocks
    for stem, linear in linears.items():                # stored size, no float32 copy
        assert linear.quantized_in_memory and linear.dtype.name == quant
        info = stored[stem + ".weight"]
        assert linear.data.nbytes == info.dtype.nbytes(info.shape) < 4 * info.n_elements / 3
        assert stem + ".weight" not in model.net.w
    assert linears["decoder.blocks.0.mlp.fc1"].kernels.backend == "numba"
    assert words(ours["text"]) == words(theirs)


def test_one_and_two_threads_give_the_same_tokens(files, audio):
    results = [_run(files, audio, "Q8_0", threads)[1] for threads in (1, 2)]
    assert [s["tokens"] for s in results[0]["segments"]] == \
        [s["tokens"] for s in results[1]["segments"]]


def test_f16_file_natively_reads_float16_and_equals_faster_whisper(files, theirs, audio):
    """The F16 file natively: its decoder projections and the logits' embedding read as
    float16 by speech_kernels.HalfLinear (no float32 copy), word-equal to faster-whisper,
    the same tokens on 1 and 2 threads."""
    from apr_native.speech_kernels import HalfLinear
    results = [_run(files, audio, "F16", threads) for threads in (1, 2)]
    net = results[1][0].net
    assert isinstance(net.linears["decoder.token_embedding"], HalfLinear)
    assert "decoder.token_embedding.weight" not in net.w
    assert "decoder.blocks.0.mlp.fc1.weight" not in net.w
    assert words(results[1][1]["text"]) == words(theirs)
    assert [s["tokens"] for s in results[0][1]["segments"]] == \
        [s["tokens"] for s in results[1][1]["segments"]]
