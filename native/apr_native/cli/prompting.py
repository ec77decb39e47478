"""How a prompt enters `apr run` / `apr chat`, as llama-cli, ollama and mlx_lm users expect.

- Chat by default: a model that carries a chat template (GGUF `tokenizer.chat_template`,
  `tokenizer_config.json`) gets the prompt as one user turn through that template;
  `--raw` completes the text as given; `--chat` and `--system` ask for the template
  (ChatML when the model has none). A model without a template (a base model) stays raw.
- The prompt comes from the argument, from `-f FILE`, or from stdin (no argument, or `-`).
- Generation that ends after 0 tokens is said on stderr with its likely cause.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, List, Optional, Tuple

from apr_core.errors import AprError, ErrorCode
from apr_core.text.chat import detect_template

STDIN = "-"


def add_template_arguments(p: argparse.ArgumentParser) -> None:
    """--raw / --chat: how the prompt meets the model's chat template."""
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--raw", action="store_true",
                      help="complete the prompt text as given, no chat template")
    mode.add_argument("--chat", action="store_true",
                      help="use the chat template: the default when the model has one; "
                      "with this flag, ChatML when it has none")


def read_prompt(args: argparse.Namespace) -> str:
    """The prompt argument, else `-f FILE`, else stdin (no argument or "-"). A file's or
    stdin's final line break is dropped (what `echo` and editors add)."""
    given = getattr(args, "prompt", None)
    path = getattr(args, "file", None)
    if path is not None:
        if given not in (None, STDIN):
            raise AprError(ErrorCode.ARGUMENT, "give the prompt as an argument or with -f "
                           "FILE, not both")
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as err:
            raise AprError(ErrorCode.IO, "cannot read the prompt file", path=path,
                           error=err.strerror or str(err))
        return _text(data, path)
    if given is not None and given != STDIN:
        return given
    if sys.stdin is None or sys.stdin.closed:
        raise AprError(ErrorCode.ARGUMENT, "no prompt: give it as an argument, with -f FILE "
                       "or on stdin")
    if sys.stdin.isatty():
        print("apr: reading the prompt from stdin (end it with Ctrl-D)", file=sys.stderr)
    stream = getattr(sys.stdin, "buffer", None)
    data = stream.read() if stream is not None else sys.stdin.read().encode("utf-8")
    if not data:
        raise AprError(ErrorCode.ARGUMENT, "no prompt: stdin was empty (give the prompt as "
                       "an argument, with -f FILE, or pipe it in)")
    return _text(data, "<stdin>")


def _text(data: bytes, where: str) -> str:
    try:
        return _strip_line_break(data.decode("utf-8"))
    except UnicodeDecodeError as err:
        raise AprError(ErrorCode.ARGUMENT, "the prompt is not UTF-8 text", source=where,
                       offset=err.start)


def _strip_line_break(text: str) -> str:
    if text.endswith("\n"):
        text = text[:-1]
        if text.endswith("\r"):
            text = text[:-1]
    return text


def has_template(model: Any) -> bool:
    return bool(getattr(model, "chat_template", None))


def template_name(model: Any) -> str:
    """What --json reports as "template": the built-in family the model's template is
    (chatml, llama3, ...), "custom" for one apr does not recognise, "chatml" for none."""
    template = getattr(model, "chat_template", None)
    return detect_template(template) or "custom"


def uses_template(args: argparse.Namespace, model: Any) -> bool:
    """The rule every prompt entry shares: --raw never, --chat or --system always, else
    whenever the model carries a chat template."""
    system = getattr(args, "system", None)
    if getattr(args, "raw", False):
        if system:
            raise AprError(ErrorCode.ARGUMENT, "--system needs the chat template; drop --raw")
        return False
    return bool(getattr(args, "chat", False) or system or has_template(model))


def prompt_ids(args: argparse.Namespace, model: Any, prompt: str
               ) -> Tuple[List[int], Optional[str]]:
    """(token ids, template name or None when raw) for one prompt."""
    if uses_template(args, model):
        return (model.prompt_ids(prompt, chat=True, system=getattr(args, "system", None)),
                template_name(model))
    return model.prompt_ids(prompt, chat=False), None


def empty_hint(args: argparse.Namespace, model: Any, template: Optional[str]) -> str:
    """One stderr line for a generation that produced 0 tokens, with the likely cause."""
    cause = "the model produced end-of-sequence at once"
    if template is None and has_template(model):
        advice = "it is a chat model: drop --raw to use its chat template"
    elif template is None:
        advice = "the model has no chat template; try a longer prompt, or --chat for ChatML"
    else:
        advice = "try rephrasing the prompt, or --raw to complete the text as given"
    return "apr: 0 tokens generated: {} ({})".format(cause, advice)


def warn_if_empty(args: argparse.Namespace, model: Any, template: Optional[str],
                  generated: int) -> None:
    if generated == 0:
        print(empty_hint(args, model, template), file=sys.stderr)
