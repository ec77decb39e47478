"""OpenAI's audio endpoints: the multipart form of POST /v1/audio/transcriptions and
/v1/audio/translations, and the response in each `response_format`.

    form = await read_form(request, limit=25 << 20)      # 413 past the limit, while reading
    req = transcription_request(form, task="transcribe")  # 400 for a bad field
    result = await engine.transcribe(samples, **req.options())
    return transcription_response(result, req.response_format)

The form fields are OpenAI's: `file` (a WAV upload), `model`, `language` (ISO-639-1;
transcriptions only), `prompt`, `response_format` (json, text, srt, vtt, verbose_json) and
`temperature` (0, the default, means Whisper's fallback schedule 0.0, 0.2 ... 1.0; any other
value samples at that temperature only). A text model's server answers both routes with 400.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from apr_core.speech.subtitles import MEDIA_TYPES, openai_body, render

from .errors import ApiError

DEFAULT_MAX_UPLOAD = 25 << 20       # bytes; OpenAI's own limit on an audio upload
RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
TASKS = {"/v1/audio/transcriptions": "transcribe", "/v1/audio/translations": "translate"}
MAX_FIELDS = 32                     # form fields besides the file (OpenAI sends a handful)


@dataclass(frozen=True)
class TranscriptionRequest:
    """One parsed request: the uploaded bytes and the options `transcribe` takes."""

    audio: bytes
    model: str
    task: str
    response_format: str
    language: Optional[str]
    prompt: Optional[str]
    temperature: float

    def options(self) -> Dict[str, Any]:
        """Keyword arguments of `apr_core.speech.transcribe.transcribe`."""
        temperature = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0) if self.temperature == 0 \
            else (self.temperature,)
        return {"language": self.language, "task": self.task, "temperature": temperature,
                "initial_prompt": self.prompt}


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "audio upload larger than {} bytes".format(limit),
                    param="file", code="request_too_large")


async def read_form(request: Request, limit: int) -> FormData:
    """The multipart form, refused with 413 once more than `limit` body bytes were declared
    or received (so a huge upload is never held), 400 when it is not a multipart form."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise _too_large(limit)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise ApiError(400, "send the audio as multipart/form-data (a 'file' field)",
                       code="invalid_request")
    received = 0

    async def counted_receive() -> Dict[str, Any]:
        nonlocal received
        message = await request.receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise _too_large(limit)
        return message
    counted = Request(request.scope, counted_receive)
    try:
        return await counted.form(max_files=1, max_fields=MAX_FIELDS, max_part_size=1 << 20)
    except (MultiPartException, HTTPException) as err:
        raise ApiError(400, "malformed multipart form: {}".format(
            getattr(err, "detail", None) or err), code="invalid_request")


def _text_field(form: FormData, name: str) -> Optional[str]:
    value = form.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError(400, "'{}' must be a text field".format(name), param=name,
                       code="invalid_request")
    return value.strip() or None


async def transcription_request(form: FormData, task: str) -> TranscriptionRequest:
    """Check OpenAI's fields; `task` is "transcribe" or "translate" (which has no
    `language`: its output is English)."""
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise ApiError(400, "missing the audio 'file' upload", param="file",
                       code="invalid_request")
    model = _text_field(form, "model")
    if model is None:
        raise ApiError(400, "missing 'model'", param="model", code="invalid_request")
    fmt = _text_field(form, "response_format") or "json"
    if fmt not in RESPONSE_FORMATS:
        raise ApiError(400, "response_format must be one of {}".format(
            ", ".join(RESPONSE_FORMATS)), param="response_format", code="invalid_request")
    raw_temperature = _text_field(form, "temperature") or "0"
    try:
        temperature = float(raw_temperature)
    except ValueError:
        temperature = float("nan")
    if not 0.0 <= temperature <= 1.0:
        raise ApiError(400, "temperature must be a number from 0 to 1", param="temperature",
                       code="invalid_request")
    granularities = [g for key in ("timestamp_granularities[]", "timestamp_granularities")
                     for g in form.getlist(key)]
    if any(g != "segment" for g in granularities):
        raise ApiError(400, "only segment timestamps are available (no word timestamps)",
                       param="timestamp_granularities", code="unsupported")
    language = _text_field(form, "language")
    if task == "translate" and language is not None:
        raise ApiError(400, "translations take no 'language' (the output is English)",
                       param="language", code="invalid_request")
    audio = await upload.read()
    return TranscriptionRequest(audio=audio, model=model, task=task, response_format=fmt,
                                language=language.lower() if language else None,
                                prompt=_text_field(form, "prompt"), temperature=temperature)


def transcription_response(result: Dict[str, Any], fmt: str) -> Response:
    """The body OpenAI sends for `fmt`: JSON objects for json/verbose_json, text otherwise."""
    if fmt in ("json", "verbose_json"):
        return JSONResponse(openai_body(result, fmt))
    return Response(render(result, fmt), media_type=MEDIA_TYPES[fmt])


def not_a_speech_model(model_id: str) -> ApiError:
    """What a text model's server answers on the audio routes."""
    return ApiError(400, "model '{}' is a text model: it cannot transcribe audio (serve a "
                    "Whisper model with `apr serve WHISPER.apr`)".format(model_id),
                    param="model", code="model_not_supported")


__all__ = ["DEFAULT_MAX_UPLOAD", "RESPONSE_FORMATS", "TASKS", "TranscriptionRequest",
           "not_a_speech_model", "read_form", "transcription_request",
           "transcription_response"]
