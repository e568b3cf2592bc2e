"""A request of the continuous-batching engine (:mod:`~vaswani.generation.continuous`), read from
any thread while the engine's thread fills it: the new ids of each step, blocking (:meth:`Request.steps`)
or not (:meth:`Request.drain`, for an event loop woken by ``on_event``), the text as it becomes
final (:meth:`Request.pieces`), the result; :meth:`Request.cancel` ends it at the next step boundary.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from vaswani.generation.config import DecodingConfig
from vaswani.generation.lm import cut_at_stop, held_back
from vaswani.generation.logprobs import TokenLogprob

Decode = Callable[[Sequence[int]], str]
"""Text of token ids (the tokenizer's ``decode``: stopping at EOS, special tokens left out)."""


@dataclass(frozen=True)
class Completion:
    """A finished request: the generated ``ids`` (with the EOS that ended them), their ``text``
    (cut before the first stop string) and why it ended: ``stop`` (EOS or a stop string),
    ``length`` (its ``max_new_tokens``) or ``cancelled``."""

    ids: list[int]
    text: str
    finish_reason: str


class Request:
    """One submitted generation, read from any thread: :meth:`steps` (the new ids of each step,
    blocking), :meth:`drain` (the same without waiting), :meth:`pieces` (text as it becomes final),
    :meth:`result`; :meth:`cancel` ends it at the next step boundary. ``on_event(request)`` is called
    from the engine's thread after each new token and at the end. Read it one way once (a
    :meth:`result` may follow any). ``tokens`` are those the decoder starts from: the prompt by
    default, a translation's BOS (its ``prompt`` is then the source). With ``logprobs`` (a number
    of alternatives, 0 for none), :attr:`logprobs` holds each generated token's
    :class:`~vaswani.generation.logprobs.TokenLogprob`, in the order of :attr:`ids`."""

    def __init__(
        self, prompt: list[int], decoding: DecodingConfig, budget: int, eos_id: int, decode: Decode,
        generator: torch.Generator | None, on_event: Callable[[Request], None] | None,
        tokens: Sequence[int] | None = None, logprobs: int | None = None,
    ) -> None:  # fmt: skip
        self.prompt, self.decoding, self.budget, self.eos_id = prompt, decoding, budget, eos_id
        self.generator = generator
        self.ids: list[int] = []  # generated so far (written by the engine's thread)
        self.top_logprobs = logprobs
        self.logprobs: list[TokenLogprob] = []  # of each id, when asked for (written before it)
        self.finish_reason: str | None = None
        self.error: BaseException | None = None
        self._decode, self._on_event = decode, on_event
        self._events: queue.SimpleQueue[list[int] | None] = queue.SimpleQueue()
        self._cancelled = threading.Event()
        self._ended = False  # the reader has seen the end
        # The engine's view of the row: its tokens, the first in view and those in the cache.
        self.tokens = list(prompt if tokens is None else tokens)
        self.start = 0
        self.cached = 0

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Stop generating (a client that went away); the row leaves at the next step boundary."""
        self._cancelled.set()

    def steps(self) -> Iterator[list[int]]:
        """The ids each step added, as they come (blocking), until the request ends; a failure
        of its generation is raised here."""
        while not self._ended:
            item = self._events.get()
            if item is None:
                self._ended = True
            else:
                yield item
        if self.error is not None:
            raise self.error

    def drain(self) -> list[int]:
        """The ids added since the last read, without waiting ([] when none yet); once
        :attr:`ended`, the request is over and every id was read (a failure is raised here)."""
        new: list[int] = []
        while not self._ended:
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._ended = True
            else:
                new.extend(item)
        if self._ended and self.error is not None:
            raise self.error
        return new

    @property
    def unread(self) -> bool:
        """Whether ids or the end wait to be read (:meth:`drain` would return or end)."""
        return not self._ended and not self._events.empty()

    @property
    def ended(self) -> bool:
        """Whether the reader has read the end (through :meth:`steps` or :meth:`drain`)."""
        return self._ended

    def pieces(self) -> Iterator[str]:
        """The text as it grows, in pieces that are final: an incomplete UTF-8 character and the
        beginning of a stop string wait for the next tokens. Joined, the pieces are the
        result's text."""
        ids: list[int] = []
        shown = 0
        stop = self.decoding.stop
        for new in self.steps():
            ids.extend(new)
            text, _ = cut_at_stop(self._decode(ids), stop)
            safe = len(text) - held_back(text, stop)
            if safe > shown:
                yield text[shown:safe]
                shown = safe
        text = self.text()
        if len(text) > shown:
            yield text[shown:]

    def result(self) -> Completion:
        """Wait for the end; the ids, text and finish reason."""
        for _ in self.steps():
            pass
        return Completion(list(self.ids), self.text(), self.finish_reason or "cancelled")

    def text(self) -> str:
        """The text of the ids so far, cut before the first stop string."""
        return cut_at_stop(self._decode(self.ids), self.decoding.stop)[0]

    def _push(self, token: int) -> bool:
        """Record the next token; whether the request has ended (EOS, a stop string, its budget)."""
        self.ids.append(token)
        self.tokens.append(token)
        self._events.put([token])
        if token == self.eos_id:
            reason: str | None = "stop"
        elif self.decoding.stop and cut_at_stop(self._decode(self.ids), self.decoding.stop)[1]:
            reason = "stop"
        else:
            reason = "length" if len(self.ids) >= self.budget else None
        if reason is not None:
            self._finish(reason)
        else:
            self._notify()
        return reason is not None

    def _finish(self, reason: str, error: BaseException | None = None) -> None:
        if error is not None:  # the error is kept, not the tensors of the frames it went through
            traceback.clear_frames(error.__traceback__)
        self.finish_reason, self.error = reason, error
        self._events.put(None)
        self._notify()

    def _notify(self) -> None:
        """Call ``on_event``; if it fails, its reader is gone: the request is cancelled."""
        if self._on_event is not None:
            try:
                self._on_event(self)
            except Exception:
                self.cancel()
