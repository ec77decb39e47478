"""`--chat-template NAME|FILE` for `apr run`, `apr chat` and `apr serve`, and the check of
the template a model will chat with, made once when it loads.

    apr run model.gguf "Hi" --chat-template chatml        # a built-in renderer
    apr serve model.gguf --chat-template ./fixed.jinja    # a Jinja file (HF syntax)

The value replaces the model's own template (GGUF `tokenizer.chat_template`,
tokenizer_config.json). Whichever template is in force is rendered on a probe
conversation at load (`apr_core.text.chat_probe`): a broken or runaway template is
reported once, with its coded error, instead of failing every request.
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from typing import Any, Dict, Optional, Tuple

from apr_core.errors import AprError, ErrorCode

FLAG = "--chat-template"


def add_argument(p: argparse.ArgumentParser) -> None:
    from apr_core.text.chat import BUILTIN_TEMPLATES   # (not needed by `apr inspect`)
    p.add_argument(FLAG, dest="chat_template", metavar="NAME|FILE",
                   help="chat template replacing the model's own: a built-in ({}) or a "
                   "Jinja file".format(", ".join(BUILTIN_TEMPLATES)))


def resolve(value: Optional[str]) -> Optional[str]:
    """The template text (or built-in name) `--chat-template` asks for; None if not given."""
    if value is None:
        return None
    from apr_core.text.chat import BUILTIN_TEMPLATES
    from apr_core.text.chat_sandbox import MAX_TEMPLATE_CHARS
    if value.strip().lower() in BUILTIN_TEMPLATES:
        return value.strip().lower()
    if not os.path.isfile(value):
        raise AprError(ErrorCode.ARGUMENT, "{} takes a built-in name ({}) or a Jinja "
                       "file".format(FLAG, ", ".join(BUILTIN_TEMPLATES)), value=value)
    try:
        with open(value, "rb") as handle:
            data = handle.read(MAX_TEMPLATE_CHARS * 4 + 1)
    except OSError as err:
        raise AprError(ErrorCode.IO, "cannot read the {} file".format(FLAG), path=value,
                       error=err.strerror or str(err))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise AprError(ErrorCode.ARGUMENT, "the {} file is not UTF-8 text".format(FLAG),
                       path=value, offset=err.start)
    if len(text) > MAX_TEMPLATE_CHARS:
        raise AprError(ErrorCode.MEMORY, "the {} file is over {} characters".format(
            FLAG, MAX_TEMPLATE_CHARS), path=value)
    if not text.strip():
        raise AprError(ErrorCode.ARGUMENT, "the {} file is empty".format(FLAG), path=value)
    return text


def option(args: argparse.Namespace) -> Optional[str]:
    """`EngineOptions.chat_template` for a command's arguments (None: the model's own)."""
    return resolve(getattr(args, "chat_template", None))


def check(model: Any, advice: str) -> Dict[str, Any]:
    """Probe the template `model` will chat with; its error, with `advice`, if broken."""
    try:
        return model.check_template()
    except AprError as err:
        raise AprError(err.code, "{} ({})".format(err.message, advice), **err.context)


def check_run(args: argparse.Namespace, model: Any) -> None:
    """`apr run` / `apr chat`: probe unless the command completes raw text."""
    if hasattr(args, "chat_template") and not getattr(args, "raw", False):
        check(model, "use --raw to complete the text as given, or {} NAME|FILE to replace "
              "the template".format(FLAG))


def check_before_serving(path: str, override: Optional[str]) -> Dict[str, Any]:
    """`apr serve`: the template checked from the model's tokenizer (read without the
    weights) before the server starts; a broken one stops `apr serve` with its error."""
    from apr_core.runtime.text_model import TextModel, tokenizer_for
    from ..mmap_source import open_mmap
    with open_mmap(path) as model_file:
        tokenizer = tokenizer_for(model_file, path)
    model = TextModel(None, tokenizer, override)
    return check(model, "apr serve will not start with it; give {} NAME|FILE to replace "
                 "it".format(FLAG))


def stored_template(meta: Dict[str, Any]) -> Tuple[Optional[str], str, str]:
    """(template, BOS text, EOS text) a model file's metadata carries (GGUF keys, the GGUF
    block of an APR file, a HF tokenizer_config), read without building the tokenizer."""
    block = meta.get("gguf") if isinstance(meta.get("gguf"), dict) else {}
    kv = block.get("kv") if isinstance(block.get("kv"), dict) else meta
    template = kv.get("tokenizer.chat_template")
    config = meta.get("hf_tokenizer_config")
    if template is None and isinstance(config, dict):
        template = config.get("chat_template")
        if isinstance(template, list):      # named templates: the default one
            template = next((t.get("template") for t in template if isinstance(t, dict)
                             and t.get("name") == "default"), None)
    tokens = kv.get("tokenizer.ggml.tokens")

    def token(key: str) -> str:
        index = kv.get(key)
        # a list, or a GGUF file's lazy array (one item decoded, not the vocabulary)
        if isinstance(tokens, Sequence) and not isinstance(tokens, str) \
                and isinstance(index, int) and 0 <= index < len(tokens):
            return str(tokens[index])
        return ""
    return (template if isinstance(template, str) else None,
            token("tokenizer.ggml.bos_token_id"), token("tokenizer.ggml.eos_token_id"))


def summary(meta: Dict[str, Any]) -> Dict[str, Any]:
    """`apr inspect`'s chat_template entry: present, family, the built-in it renders like,
    and whether it passes the load-time probe (remembered across processes)."""
    from ..template_cache import describe
    return describe(*stored_template(meta))


__all__ = ["add_argument", "resolve", "option", "check", "check_run", "check_before_serving",
           "stored_template", "summary"]
