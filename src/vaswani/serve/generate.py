"""A streamed translation as the server runs it: its text built by a
:class:`~vaswani.serve.streaming.TextStream` step by step, so that the streamed text and the
same request's one-shot text are one and the same (completions run on the continuous-batching
engine, :mod:`vaswani.serve.engine`).

``translate_one(translator, text, decoding, watch)`` returns its :class:`Generation`;
``watch(pieces)`` (optional) is called after each step with the new text of every row ("" where
none) and may raise :class:`~vaswani.serve.batching.Cancelled` to stop generation at that step
boundary (the client has gone). It runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.errors import DataError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_ids
from vaswani.serve.streaming import TextStream
from vaswani.tasks.evaluation import model_device
from vaswani.tasks.translator import Translator

Watch = Callable[[list[str]], None]


@dataclass
class Generation:
    """One row's text, why it ended (``stop``: EOS or a stop string; ``length``: the budget), the
    tokens it generated (up to its end) and the tokens of its input."""

    text: str
    finish_reason: str
    tokens: int
    input_tokens: int


class Rows:
    """The growing rows of one call: each step's tokens pushed into each row's stream until the
    row ends (EOS, or a stop string)."""

    def __init__(
        self, n: int, decode: Callable[[Sequence[int]], str], eos_id: int, stop: Sequence[str]
    ) -> None:
        self.streams = [TextStream(decode, stop) for _ in range(n)]
        self.ended = [False] * n
        self.eos_id = eos_id

    def push(self, choice: Tensor) -> list[str]:
        """The new text of each row after the step that chose ``choice`` (batch,)."""
        pieces = []
        for i, token in enumerate(choice.tolist()):
            piece = ""
            if not self.ended[i]:
                if token == self.eos_id:
                    self.ended[i] = True
                else:
                    piece = self.streams[i].push(token)
                    self.ended[i] = self.streams[i].stopped
            pieces.append(piece)
        return pieces

    def finish(self, watch: Watch | None, input_tokens: Sequence[int]) -> list[Generation]:
        rests = [stream.finish() for stream in self.streams]
        if watch is not None and any(rests):
            watch(rests)
        return [
            Generation(stream.shown, "stop" if ended else "length", len(stream.ids), n)
            for stream, ended, n in zip(self.streams, self.ended, input_tokens, strict=True)
        ]


def source_ids(translator: Translator, text: str) -> list[int]:
    """The source ids of ``text``; more than the model's max_len is a one-line error."""
    ids = translator.src_tok.encode(text)
    if len(ids) > translator.model.config.max_len:
        raise DataError(
            f"input: {len(ids)} tokens exceed the model's max_len={translator.model.config.max_len}"
        )
    return ids


@torch.no_grad()
def translate_one(
    translator: Translator, text: str, decoding: DecodingConfig, watch: Watch | None = None
) -> Generation:
    """The translation of one text, greedy or sampled, as :meth:`Translator.translate` gives it."""
    model = translator.model
    model.eval()
    ids = source_ids(translator, text)
    device = model_device(model)
    tok = translator.tgt_tok
    rows = Rows(1, tok.decode, tok.eos_id, ())

    def on_step(choice: Tensor) -> bool:
        pieces = rows.push(choice)
        if watch is not None:
            watch(pieces)
        return all(rows.ended)

    src = torch.tensor([ids], device=device)
    translate_ids(model, src, tok.bos_id, tok.eos_id, decoding, decoding.generator(device),
                  suppress=translator.suppressed, on_step=on_step)  # fmt: skip
    return rows.finish(watch, [len(ids)])[0]
