"""The chat pane: type a message, Enter sends it; the reply streams in token by token
from THE engine (`apr_native.engine.load_engine`, loaded on the first message) in a
worker thread. Prompts are built as `apr chat` builds them: through the model's chat
template when it has one (the whole conversation), else as one growing plain text.
Generation is greedy unless the app is given a sampler."""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Input, Static
from textual.worker import get_current_worker

from ..cli.prompting import has_template


class ChatView(Vertical):
    """A transcript (one Static per message) above an input line."""

    DEFAULT_CSS = """
    ChatView > VerticalScroll { height: 1fr; }
    ChatView .user { color: $accent; margin-top: 1; }
    ChatView .assistant { margin-bottom: 0; }
    ChatView > #chat-status { height: 1; color: $text-muted; }
    """

    def __init__(self, path: str, max_tokens: int = 128, options: Any = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.max_tokens = max_tokens
        self.options = options                       # EngineOptions (None: defaults)
        self.engine: Any = None
        self.messages: List[dict] = []               # the conversation (chat template)
        self.transcript: List[Tuple[str, str]] = []  # (role, text) as shown
        self.plain = ""                              # the conversation without a template
        self.busy = False
        self.query_text = ""                         # no search here (see apply_filter)
        self._reply: Optional[Static] = None         # the reply being streamed

    def compose(self) -> ComposeResult:
        yield VerticalScroll(id="chat-log")
        yield Static(Text("Enter sends; Esc leaves the input (then g/s/h/c switch views)"),
                     id="chat-status")
        yield Input(placeholder="message the model…", id="chat-input")

    @property
    def input(self) -> Input:
        return self.query_one("#chat-input", Input)

    def activate(self) -> None:
        """Nothing to compute until the first message."""

    def focus_main(self) -> None:
        self.input.focus()

    def ready(self) -> bool:
        return not self.busy

    def apply_filter(self, query: str) -> None:
        """The chat has no tensors to filter."""

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if not text or self.busy:
            return
        self.input.value = ""
        self.send(text)

    def send(self, text: str) -> None:
        """Add a user turn and stream the model's reply into the transcript."""
        self.busy = True
        self.transcript.append(("user", text))
        log = self.query_one("#chat-log", VerticalScroll)
        log.mount(Static(Text("> " + text), classes="user"))
        self._reply = Static(Text("…"), classes="assistant")
        log.mount(self._reply)
        self.transcript.append(("assistant", ""))
        self.run_worker(lambda: self._generate(text), thread=True, exclusive=True,
                        group="chat", name="chat reply")

    def _generate(self, text: str) -> None:
        """Worker thread: load the engine (once), build the prompt, stream the reply."""
        worker = get_current_worker()

        def ui(callback: Any, *args: Any) -> None:
            if not worker.is_cancelled:      # the app is closing: nothing to draw
                self.app.call_from_thread(callback, *args)
        try:
            if self.engine is None:
                ui(self._status, "loading the model…")
                from ..engine import load_engine
                self.engine = load_engine(self.path, self.options)
            model = self.engine.model
            if has_template(model):
                self.messages.append({"role": "user", "content": text})
                ids = model.chat_ids(self.messages)
            else:
                self.plain += text + "\n"
                ids = model.prompt_ids(self.plain)
            ui(self._status, "generating…")
            pieces, tokens = [], 0
            for piece in self.engine.stream(ids, None, self.max_tokens):
                if worker.is_cancelled:
                    return
                pieces.append(piece.text)
                tokens += piece.token_id >= 0     # -1: text flushed at the finish
                ui(self._append, piece.text)
            reply = "".join(pieces)
            if has_template(model):
                self.messages.append({"role": "assistant", "content": reply})
            else:
                self.plain += reply + "\n"
            ui(self._status, "{} tokens generated".format(tokens))
        except Exception as err:   # shown in the pane: the TUI must survive a bad turn
            ui(self._status, "error: {}".format(err))
        finally:
            ui(self._done)

    def _append(self, piece: str) -> None:
        role, so_far = self.transcript[-1]
        self.transcript[-1] = (role, so_far + piece)
        if self._reply is not None:
            self._reply.update(Text(self.transcript[-1][1]))
        self.query_one("#chat-log", VerticalScroll).scroll_end(animate=False)

    def _status(self, text: str) -> None:
        self.query_one("#chat-status", Static).update(Text(text))

    def _done(self) -> None:
        self.busy = False
