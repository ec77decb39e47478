"""Text: tokenizers (BPE, SentencePiece) and chat templates, standard library only.

`Tokenizer.from_gguf_metadata(kv)` / `Tokenizer.from_tokenizer_json(path)` build a
tokenizer; `StreamingDetokenizer` turns generated ids into text; `render_chat` formats a
conversation with the model's chat template.
"""
from .chat import render_chat
from .tokenizer import StreamingDetokenizer, Tokenizer

__all__ = ["Tokenizer", "StreamingDetokenizer", "render_chat"]
