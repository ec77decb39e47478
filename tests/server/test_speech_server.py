"""`apr serve WHISPER.apr`: OpenAI's POST /v1/audio/transcriptions and /translations with
the official `openai` client on a loopback server, in every response_format.

Oracles: the words espeak-ng was asked to say, apr's own `transcribe` run in this process
on the same file (the server must answer exactly what the library answers), and the `srt`
and `webvtt-py` parsers for the subtitle formats."""
import datetime
import io
import threading
import time
import warnings

import pytest

pytestmark = [pytest.mark.native, pytest.mark.real_model]

import openai  # noqa: E402
import srt  # noqa: E402
import webvtt  # noqa: E402

from server_util import running_server  # noqa: E402
from speech_util import espeak_wav, whisper_apr as import_whisper, words  # noqa: E402

API_KEY = "k-speech"
MODEL = "whisper-base"
SENTENCE = "The quick brown fox jumps over the lazy dog."
MAX_UPLOAD = 1 << 20


@pytest.fixture(scope="module")
def whisper_apr(whisper_base_dir, tmp_path_factory):
    return import_whisper(str(whisper_base_dir), tmp_path_factory.mktemp("whisper"))


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    path = tmp_path_factory.mktemp("audio") / "fox.wav"
    path.write_bytes(espeak_wav(SENTENCE))
    return str(path)


@pytest.fixture(scope="module")
def native(whisper_apr, clip):
    """apr's library on the same bytes, loaded as the server and `apr run --input` load it
    (apr_native.speech_native: the encoder's products in row blocks over threads, which
    sum in another order than one BLAS call: 2.5e-6 apart in no_speech_prob): what the
    server must answer."""
    from apr_core.speech.audio import read_audio
    from apr_core.speech.transcribe import transcribe
    from apr_native.speech_native import load_native_whisper
    model = load_native_whisper(whisper_apr)
    with open(clip, "rb") as handle:
        samples = read_audio(handle.read())
    return {"transcribe": transcribe(model, samples),
            "translate": transcribe(model, samples, task="translate")}


@pytest.fixture(scope="module")
def server(whisper_apr, tmp_path_factory):
    log = tmp_path_factory.mktemp("server") / "stderr.txt"
    args = ["--model-id", MODEL, "--max-upload", str(MAX_UPLOAD)]
    with running_server(whisper_apr, args, log, API_KEY) as running:
        yield running


def _transcribe(server, clip, **kw):
    with open(clip, "rb") as handle:
        return server.client().audio.transcriptions.create(model=MODEL, file=handle, **kw)


def _ms(seconds):
    return datetime.timedelta(milliseconds=int(round(seconds * 1000)))


def test_the_spoken_words_come_back_as_json(server, clip, native):
    expected = native["transcribe"]
    # an independent fact first: espeak-ng said these words
    assert {"quick", "fox", "over", "lazy", "dog"} <= set(words(expected["text"]))
    answer = _transcribe(server, clip)                          # response_format json
    assert answer.text == expected["text"]


def test_verbose_json_has_openai_segments(server, clip, native):
    expected = native["transcribe"]
    answer = _transcribe(server, clip, response_format="verbose_json")
    assert answer.task == "transcribe" and expected["language"] == "en"
    assert answer.language == "english"                 # OpenAI names the language
    assert answer.duration == pytest.approx(expected["duration"])
    assert answer.text == expected["text"]
    assert len(answer.segments) == len(expected["segments"]) >= 1
    for got, want in zip(answer.segments, expected["segments"]):
        assert (got.id, got.seek, got.tokens) == (want["id"], want["seek"], want["tokens"])
        assert (got.start, got.end, got.text) == (want["start"], want["end"], want["text"])
        assert got.avg_logprob == pytest.approx(want["avg_logprob"])
        assert got.no_speech_prob == pytest.approx(want["no_speech_prob"])


def test_text_srt_and_vtt(server, clip, native):
    expected = native["transcribe"]
    assert _transcribe(server, clip, response_format="text").strip() == expected["text"]
    segments = expected["segments"]
    cues = list(srt.parse(_transcribe(server, clip, response_format="srt")))
    assert [(c.start, c.end, c.content) for c in cues] == \
        [(_ms(s["start"]), _ms(s["end"]), s["text"].strip()) for s in segments]
    vtt = _transcribe(server, clip, response_format="vtt")
    captions = webvtt.from_buffer(io.StringIO(vtt)).captions
    assert [(c.start, c.end, c.text) for c in captions] == \
        [(srt.timedelta_to_srt_timestamp(_ms(s["start"])).replace(",", "."),
          srt.timedelta_to_srt_timestamp(_ms(s["end"])).replace(",", "."), s["text"].strip())
         for s in segments]


def test_translations_route(server, clip, native):
    with open(clip, "rb") as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # the client's own notice
        answer = server.client().audio.translations.create(model=MODEL, file=handle)
    assert answer.text == native["translate"]["text"]


def test_models_lists_the_speech_model(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_bad_requests_get_coded_errors(server, clip):
    client = server.client()
    with pytest.raises(openai.BadRequestError) as bad:      # not audio at all
        client.audio.transcriptions.create(model=MODEL, file=("x.wav", b"RIFF\x10\0\0\0WAVEjunk"))
    error = bad.value.body
    assert error["param"] == "file" and error["code"] in ("format", "corrupt")
    assert "E00" in error["message"]                        # apr's error code, for the user
    big = b"RIFF" + b"\0" * (MAX_UPLOAD + 1)
    with pytest.raises(openai.APIStatusError) as large:
        client.audio.transcriptions.create(model=MODEL, file=("big.wav", big))
    assert large.value.status_code == 413 and large.value.body["code"] == "request_too_large"
    with open(clip, "rb") as handle:
        audio = handle.read()
    with pytest.raises(openai.NotFoundError):
        client.audio.transcriptions.create(model="whisper-large", file=("a.wav", audio))
    with pytest.raises(openai.BadRequestError) as fmt:
        client.audio.transcriptions.create(model=MODEL, file=("a.wav", audio),
                                           response_format="docx")
    assert fmt.value.body["param"] == "response_format"
    with pytest.raises(openai.BadRequestError) as lang:     # refused by apr's transcribe
        client.audio.transcriptions.create(model=MODEL, file=("a.wav", audio), language="xx")
    assert "language" in lang.value.body["message"] and lang.value.body["code"] == "argument"


def test_the_event_loop_stays_free_while_transcribing(server, clip):
    """A probe is answered while a transcription is still running on the worker thread."""
    done = threading.Event()
    outcome = {}

    def work():
        try:
            outcome["text"] = _transcribe(server, clip).text
        finally:
            done.set()
    thread = threading.Thread(target=work)
    thread.start()
    answered_while_busy = False
    while not done.is_set():
        if server.http.get("/health", timeout=30).status_code == 200 and not done.is_set() \
                and server.metric("apr_queue_depth") >= 1:
            answered_while_busy = True
            break
        time.sleep(0.05)
    thread.join()
    assert answered_while_busy
    assert outcome["text"]
