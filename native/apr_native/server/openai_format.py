"""The JSON shapes of OpenAI's responses: completions, stream chunks, logprobs, embeddings,
models.

Chat and text completions differ only in names and in where the text sits (a message or
`delta` vs a `text` field) and in the shape of `logprobs`, so one class builds both.
"""
from __future__ import annotations

import base64
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

# kind -> (id prefix, object of a whole response, object of a stream chunk)
KINDS = {"chat": ("chatcmpl-", "chat.completion", "chat.completion.chunk"),
         "text": ("cmpl-", "text_completion", "text_completion")}

Json = Dict[str, Any]
TokenText = Callable[[int], bytes]      # token id -> its bytes


@dataclass
class TokenLogprob:
    """One generated token's log-probability and its best alternatives."""

    token_id: int
    logprob: float
    top: List[Tuple[int, float]] = field(default_factory=list)


@dataclass
class ChoiceResult:
    index: int
    text: str
    finish_reason: str
    logprobs: Optional[List[TokenLogprob]] = None
    tool_calls: Optional[List[Json]] = None


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> Json:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


class Completion:
    """Builds one request's response objects with a shared id, timestamp and model name;
    `token_bytes` names tokens in logprobs."""

    def __init__(self, kind: str, model: str, token_bytes: Optional[TokenText] = None,
                 backend: Optional[str] = None) -> None:
        self.kind = kind
        prefix, self.object, self.chunk_object = KINDS[kind]
        self.id = prefix + uuid.uuid4().hex[:24]
        self.model = model
        self.created = int(time.time())
        self.token_bytes = token_bytes
        self.fingerprint = "apr-" + backend if backend else None

    def _envelope(self, obj: str, choices: List[Json]) -> Json:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint, "choices": choices}

    # ------------------------------------------------------------------ logprobs

    def _token(self, token_id: int) -> Tuple[str, List[int]]:
        raw = self.token_bytes(token_id) if self.token_bytes else b""
        return raw.decode("utf-8", errors="replace"), list(raw)

    def logprobs(self, entries: Optional[List[TokenLogprob]], offset: int = 0
                 ) -> Optional[Json]:
        """Chat: {"content": [{token, logprob, bytes, top_logprobs}]}; completions:
        {tokens, token_logprobs, top_logprobs, text_offset} (`offset`: text before)."""
        if entries is None:
            return None
        if self.kind == "chat":
            content = []
            for e in entries:
                token, raw = self._token(e.token_id)
                top = []
                for t, lp in e.top:
                    name, tb = self._token(t)
                    top.append({"token": name, "logprob": lp, "bytes": tb})
                content.append({"token": token, "logprob": e.logprob, "bytes": raw,
                                "top_logprobs": top})
            return {"content": content, "refusal": None}
        tokens, offsets, tops = [], [], []
        for e in entries:
            token = self._token(e.token_id)[0]
            offsets.append(offset)
            offset += len(token)
            tokens.append(token)
            tops.append({self._token(t)[0]: lp for t, lp in e.top})
        return {"tokens": tokens, "token_logprobs": [e.logprob for e in entries],
                "top_logprobs": tops, "text_offset": offsets}

    # ------------------------------------------------------------------ choices

    def _choice(self, index: int, text: Optional[str], finish: Optional[str], stream: bool,
                logprobs: Optional[Json] = None, tool_calls: Optional[List[Json]] = None,
                role: bool = False) -> Json:
        choice: Json = {"index": index, "logprobs": logprobs, "finish_reason": finish}
        if self.kind == "text":
            choice["text"] = text or ""
        elif stream:
            delta: Json = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            if tool_calls:
                delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(tool_calls)]
            choice["delta"] = delta
        else:
            message: Json = {"role": "assistant",
                             "content": None if tool_calls and not text else text or "",
                             "refusal": None}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice["message"] = message
        return choice

    def response(self, choices: List[ChoiceResult], counts: Json) -> Json:
        """The whole (non-streamed) response; `counts` is `usage(...)`."""
        body = self._envelope(self.object, [
            self._choice(c.index, c.text, c.finish_reason, False, self.logprobs(c.logprobs),
                         c.tool_calls) for c in sorted(choices, key=lambda c: c.index)])
        body["usage"] = counts
        return body

    def first_chunks(self, n: int) -> List[Json]:
        """Chat streams open each choice with the assistant role (OpenAI does)."""
        if self.kind != "chat":
            return []
        return [self._envelope(self.chunk_object, [self._choice(i, "", None, True, role=True)])
                for i in range(n)]

    def chunk(self, index: int, text: Optional[str], logprobs: Optional[Json] = None,
              tool_calls: Optional[List[Json]] = None, finish: Optional[str] = None) -> Json:
        if self.kind == "text" and text is None:
            text = ""
        return self._envelope(self.chunk_object, [
            self._choice(index, text, finish, True, logprobs, tool_calls)])

    def usage_chunk(self, counts: Json) -> Json:
        """Sent last when the client asked for `stream_options.include_usage`."""
        body = self._envelope(self.chunk_object, [])
        body["usage"] = counts
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


def model_list(model_id: str, created: int, meta: Optional[Json] = None) -> Json:
    return {"object": "list", "data": [model_card(model_id, created, meta)]}


def model_card(model_id: str, created: int, meta: Optional[Json] = None) -> Json:
    """`meta` (backend, context, ...) as llama-server reports it in its model card."""
    card: Json = {"id": model_id, "object": "model", "created": created, "owned_by": "apr"}
    if meta:
        card["meta"] = meta
    return card


__all__ = ["ChoiceResult", "Completion", "KINDS", "TokenLogprob", "embedding_list",
           "model_card", "model_list", "usage"]
