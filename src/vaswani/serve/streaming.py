"""Streaming: incremental detokenization, server-sent events, and a stream's cancellation.

:class:`TextStream` turns the ids a model produces into text pieces that are never cut inside a
character: it decodes all the ids so far and emits only the new text, once the text no longer
ends in an incomplete UTF-8 character (which the byte-level BPE decoder shows as U+FFFD; a
Chinese character or an emoji may span several byte-level tokens) nor in the beginning of a stop
string. The pieces joined are the text decoded at the end (without a last character whose
bytes the token budget cut short).

:class:`Pipe` carries the pieces from the model's worker thread to the event loop;
:func:`sse` formats one event (``data: JSON``), and :data:`DONE` ends a stream as OpenAI's does.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from vaswani.serve.batching import Cancelled
from vaswani.tasks.lm import cut_at_stop, held_back

DONE = "data: [DONE]\n\n"
END = object()  # what a Pipe yields after the last piece


class TextStream:
    """The text of a growing list of ids, handed out in pieces (see the module docstring).

    ``decode(ids) -> str``; ``stop`` cuts the text before the first stop string (a language
    model's), and :attr:`stopped` says whether one was met."""

    def __init__(self, decode: Callable[[Sequence[int]], str], stop: Sequence[str] = ()) -> None:
        self.decode, self.stop = decode, tuple(stop)
        self.ids: list[int] = []
        self.shown = ""
        self.stopped = False

    def push(self, token: int) -> str:
        """Append ``token``; the new text that is now safe to show ("" when none is)."""
        self.ids.append(token)
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


class Pipe:
    """Pieces sent from a worker thread (:meth:`send`, :meth:`close`) and read on the event loop
    (``async for``). :attr:`cancelled` is set when the reader stops early (the client has gone);
    :meth:`check` raises :class:`Cancelled` in the worker then."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.cancelled = threading.Event()

    def send(self, item: Any) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def close(self, error: BaseException | None = None) -> None:
        self.send(error if error is not None else END)

    def check(self) -> None:
        if self.cancelled.is_set():
            raise Cancelled

    async def __aiter__(self) -> AsyncIterator[Any]:
        try:
            while (item := await self.queue.get()) is not END:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.cancelled.set()


def sse(payload: dict[str, Any]) -> str:
    """One server-sent event carrying ``payload`` as JSON (UTF-8, not escaped)."""
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
