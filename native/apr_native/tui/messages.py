"""Messages the views send the app."""
from __future__ import annotations

from textual.message import Message


class TensorChosen(Message):
    """A view asks to show one tensor's histogram (Enter on a tensor)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__()
