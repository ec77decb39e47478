"""Text: tokenizers (BPE, SentencePiece) and chat templates, standard library only.

`tokenizer_from_gguf(kv)` / `tokenizer_from_json(path)` build a
tokenizer; `StreamingDetokenizer` turns generated ids into text; `render_chat` formats a
conversation with the model's chat template.
"""
from .chat import render_chat
from .tokenizer import StreamingDetokenizer, Tokenizer
from .load import tokenizer_from_gguf, tokenizer_from_json

__all__ = ["Tokenizer", "StreamingDetokenizer", "render_chat", "tokenizer_from_gguf",
           "tokenizer_from_json"]
