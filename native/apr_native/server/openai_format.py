"""The JSON shapes of OpenAI's responses: completions, stream chunks, embeddings, models.

Chat and text completions differ only in names and in where the text sits (a message or
`delta` vs a `text` field), so one table holds both.
"""
from __future__ import annotations

import base64
import time
import uuid
from typing import Any, Dict, List, Optional

import numpy as np

# kind -> (id prefix, object of a whole response, object of a stream chunk)
KINDS = {"chat": ("chatcmpl-", "chat.completion", "chat.completion.chunk"),
         "text": ("cmpl-", "text_completion", "text_completion")}

Json = Dict[str, Any]


def usage(prompt_tokens: int, completion_tokens: int) -> Json:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


class Completion:
    """Builds one request's response objects with a shared id, timestamp and model name."""

    def __init__(self, kind: str, model: str) -> None:
        self.kind = kind
        prefix, self.object, self.chunk_object = KINDS[kind]
        self.id = prefix + uuid.uuid4().hex[:24]
        self.model = model
        self.created = int(time.time())

    def _envelope(self, obj: str, choices: List[Json]) -> Json:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": None, "choices": choices}

    def _choice(self, text: Optional[str], finish: Optional[str], stream: bool,
                role: bool = False) -> Json:
        choice: Json = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.kind == "text":
            choice["text"] = text or ""
        elif stream:
            delta: Json = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice["message"] = {"role": "assistant", "content": text or ""}
        return choice

    def response(self, text: str, finish: str, prompt_tokens: int,
                 completion_tokens: int) -> Json:
        """The whole (non-streamed) response."""
        body = self._envelope(self.object, [self._choice(text, finish, stream=False)])
        body["usage"] = usage(prompt_tokens, completion_tokens)
        return body

    def first_chunk(self) -> Optional[Json]:
        """Chat streams open with the assistant role and empty content (OpenAI does)."""
        if self.kind != "chat":
            return None
        return self._envelope(self.chunk_object, [self._choice("", None, True, role=True)])

    def chunk(self, text: str) -> Json:
        return self._envelope(self.chunk_object, [self._choice(text, None, True)])

    def final_chunk(self, finish: str) -> Json:
        text = "" if self.kind == "text" else None
        return self._envelope(self.chunk_object, [self._choice(text, finish, True)])

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> Json:
        """Sent last when the client asked for `stream_options.include_usage`."""
        body = self._envelope(self.chunk_object, [])
        body["usage"] = usage(prompt_tokens, completion_tokens)
        return body


def embedding_list(vectors: List[np.ndarray], encoding: str, model: str,
                   prompt_tokens: int) -> Json:
    """`base64` is little-endian float32 bytes, which the openai client decodes itself."""
    def encode(v: np.ndarray) -> Any:
        if encoding == "base64":
            return base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
        return [float(x) for x in v]
    return {"object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": encode(v)}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def model_list(model_id: str, created: int) -> Json:
    return {"object": "list", "data": [model_card(model_id, created)]}


def model_card(model_id: str, created: int) -> Json:
    return {"id": model_id, "object": "model", "created": created, "owned_by": "apr"}


__all__ = ["Completion", "KINDS", "embedding_list", "model_card", "model_list", "usage"]
