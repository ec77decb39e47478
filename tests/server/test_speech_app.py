"""The audio routes in-process (Starlette's test client), for what needs no loaded model:
a text model's server refuses transcriptions with 400, a speech server answers 503 until
its Whisper model is loaded, reports a failed load, and keeps auth on its routes.
The real transcriptions are tests/server/test_speech_server.py."""
import io
import wave

import pytest

pytestmark = [pytest.mark.native]

from starlette.testclient import TestClient  # noqa: E402

from apr_native.server.app import ServerSettings, create_app  # noqa: E402
from apr_native.server.engine import ServingEngine  # noqa: E402
from apr_native.server.speech_app import create_speech_app  # noqa: E402
from apr_native.server.speech_engine import SpeechEngine  # noqa: E402

AUTH = {"Authorization": "Bearer k"}


def _wav(seconds=0.5, rate=16000):
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(seconds * rate))
    return out.getvalue()


@pytest.mark.parametrize("path", ["/v1/audio/transcriptions", "/v1/audio/translations"])
def test_a_text_model_refuses_transcriptions(tmp_path, path):
    engine = ServingEngine(str(tmp_path / "never-loaded.gguf"), "smol")
    client = TestClient(create_app(engine, ServerSettings(api_key="k"), manage_engine=False))
    answer = client.post(path, headers=AUTH, data={"model": "smol"},
                         files={"file": ("a.wav", _wav(), "audio/wav")})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "model_not_supported" and error["param"] == "model"
    assert "text model" in error["message"]
    assert client.post(path, data={"model": "smol"}).status_code == 401   # auth first


def test_a_speech_server_is_not_ready_until_loaded(tmp_path):
    engine = SpeechEngine(str(tmp_path / "never-loaded.apr"), "whisper")  # never started
    client = TestClient(create_speech_app(engine, ServerSettings(api_key="k"),
                                          manage_engine=False))
    assert client.get("/ready").status_code == 503
    answer = client.post("/v1/audio/transcriptions", headers=AUTH, data={"model": "whisper"},
                         files={"file": ("a.wav", _wav(), "audio/wav")})
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "model_not_ready"
    models = client.get("/v1/models", headers=AUTH).json()
    assert [m["id"] for m in models["data"]] == ["whisper"]
    assert models["data"][0]["meta"]["task"] == "speech-to-text"
    assert client.get("/v1/models", headers={"Authorization": "Bearer x"}).status_code == 401
    chat = client.post("/v1/chat/completions", headers=AUTH,
                       json={"model": "whisper", "messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 400 and chat.json()["error"]["code"] == "model_not_supported"


def test_a_failed_load_is_reported(tmp_path):
    bogus = tmp_path / "bogus.apr"
    bogus.write_bytes(b"not a model at all" * 10)
    engine = SpeechEngine(str(bogus), "whisper")
    with TestClient(create_speech_app(engine)) as client:      # the lifespan starts it
        assert not engine.wait_ready(timeout=60)
        ready = client.get("/ready")
        assert ready.status_code == 503
        message = ready.json()["error"]["message"]
        assert message.startswith("cannot load whisper: E0")    # apr's coded error
        answer = client.post("/v1/audio/transcriptions", data={"model": "whisper"},
                             files={"file": ("a.wav", _wav(), "audio/wav")})
        assert answer.status_code == 503 and answer.json()["error"]["message"] == message
