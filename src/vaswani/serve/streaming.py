"""Streaming: incremental detokenization and server-sent events.

:class:`TextStream` turns the ids a model produces into text pieces that are never cut inside a
character: it decodes all the ids so far and emits only the new text, once the text no longer
ends in an incomplete UTF-8 character (which the byte-level BPE decoder shows as U+FFFD; a
Chinese character or an emoji may span several byte-level tokens) nor in the beginning of a stop
string. The pieces joined are the text decoded at the end (without a last character whose
bytes the token budget cut short).

:func:`sse` formats one event (``data: JSON``), and :data:`DONE` ends a stream as OpenAI's does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from vaswani.generation.lm import cut_at_stop, held_back

DONE = "data: [DONE]\n\n"


class TextStream:
    """The text of a growing list of ids, handed out in pieces (see the module docstring).

    ``decode(ids) -> str``; ``stop`` cuts the text before the first stop string (a language
    model's), and :attr:`stopped` says whether one was met."""

    def __init__(self, decode: Callable[[Sequence[int]], str], stop: Sequence[str] = ()) -> None:
        self.decode, self.stop = decode, tuple(stop)
        self.ids: list[int] = []
        self.shown = ""
        self.stopped = False

    def push(self, tokens: Sequence[int]) -> str:
        """Append ``tokens`` (decoded once, however many); the new text that is now safe to show
        ("" when none is)."""
        self.ids.extend(tokens)
        text, self.stopped = cut_at_stop(self.decode(self.ids), self.stop)
        safe = text[: len(text) - held_back(text, self.stop)]
        return self._advance(safe)

    def finish(self) -> str:
        """The rest of the text, once generation has ended; a last character that the budget cut
        short (its bytes incomplete) is left out."""
        text, self.stopped = cut_at_stop(self.decode(self.ids), self.stop)
        return self._advance(text.removesuffix("\ufffd"))

    def _advance(self, text: str) -> str:
        if len(text) <= len(self.shown) or not text.startswith(self.shown):
            return ""
        piece, self.shown = text[len(self.shown) :], text
        return piece


def sse(payload: dict[str, Any]) -> str:
    """One server-sent event carrying ``payload`` as JSON (UTF-8, not escaped)."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
