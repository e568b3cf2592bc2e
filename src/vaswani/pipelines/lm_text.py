"""A language model's text: the documents of a run, one stream of token ids, the windows cut from
it, and the next-token loss over them (what the lm task trains and scores, and what a GPT
classifier's auxiliary loss and the benchmarks measure)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from vaswani.data.config import TextData
from vaswani.data.text import DEFAULT_TEXT, default_documents, read_documents
from vaswani.errors import ConfigError, DataError
from vaswani.models.gpt import GPT
from vaswani.pipelines.common import model_device
from vaswani.tokenizer import LMTokenizer


def load_documents(spec: TextData) -> tuple[list[str], str]:
    """The documents of a run and a name for them."""
    if spec.source == "default":
        return default_documents(), DEFAULT_TEXT
    if spec.source != "text" or not spec.text:
        raise ConfigError("config field 'data.text': a language model needs text files (--text)")
    return read_documents(spec.text), ", ".join(spec.text)


def encode_documents(tok: LMTokenizer, documents: Sequence[str]) -> Tensor:
    """One stream of token ids, each document followed by the end of text (and preceded by the
    tokenizer's BOS when it has one)."""
    ids: list[int] = []
    for encoded in tok.encode_batch(documents):
        ids.extend(encoded)
        ids.append(tok.eos_id)
    return torch.tensor(ids, dtype=torch.long)


def run_tokenizer(path: Path, data: TextData) -> LMTokenizer:
    """The tokenizer of a run, with the special tokens its data section names."""
    return LMTokenizer.load(path, eos_token=data.eos_token, bos_token=data.bos_token)


def windows(ids: Tensor, starts: Tensor, length: int) -> Tensor:
    """The (len(starts), length) windows ``ids[s : s + length]``."""
    return ids[starts[:, None] + torch.arange(length)]


def next_token_loss(model: nn.Module, chunk: Tensor, vocab_size: int | None = None) -> tuple[Tensor, int]:
    """Summed cross-entropy of predicting ``chunk[:, 1:]`` from ``chunk[:, :-1]``, and the count.

    With ``vocab_size`` (the tokenizer's), the softmax runs over the real tokens only: the rows
    that pad the embedding to a multiple of 64 are never targets, and generation never picks
    them, so no probability is spent on them. The head and the loss run as one chunked pass
    (:func:`~vaswani.layers.cross_entropy.linear_cross_entropy`, through the model's forward so
    that DDP, FSDP and compilation see it): the (rows, length, vocab) logits are never held whole.
    """
    targets = chunk[:, 1:]
    return model(chunk[:, :-1], targets=targets, n_classes=vocab_size), targets.numel()


@torch.no_grad()
def stream_loss(
    model: GPT,
    ids: Tensor,
    batch_size: int = 16,
    max_windows: int | None = None,
    vocab_size: int | None = None,
    length: int | None = None,
) -> float:
    """Mean next-token loss (nats) over ``ids``, cut into non-overlapping windows of ``length``
    tokens of context (default: the model's ``max_len``), so that each token is predicted once
    (at most ``max_windows`` windows, spread evenly over the text); ``vocab_size`` as in
    :func:`next_token_loss`. The windows are cut from ``ids`` where it is and run on the model's
    device."""
    context = model.config.max_len if length is None else length
    device = model_device(model)
    starts = torch.arange(0, max(1, len(ids) - 1), context)
    if max_windows is not None and len(starts) > max_windows:
        starts = starts[torch.linspace(0, len(starts) - 1, max_windows).long()]
    total, count = 0.0, 0
    for i in range(0, len(starts), batch_size):
        group = starts[i : i + batch_size]
        full = group[group + context + 1 <= len(ids)]
        if len(full):
            loss, n = next_token_loss(model, windows(ids, full, context + 1).to(device), vocab_size)
            total, count = total + float(loss), count + n
        for start in group[group + context + 1 > len(ids)].tolist():  # the short last window
            loss, n = next_token_loss(model, ids[start:][None].to(device), vocab_size)
            total, count = total + float(loss), count + n
    if count == 0:
        raise DataError("the text has fewer than two tokens: nothing to predict")
    return total / count


class WindowBatches(Sequence[Tensor]):
    """The training batches of :class:`LMTask`, each built when it is read: batch ``i`` is the
    (batch_size, length) windows at ``starts[i·batch_size : (i+1)·batch_size]`` (overlapping
    windows are never all held at once)."""

    def __init__(self, ids: Tensor, starts: Tensor, batch_size: int, length: int, n_batches: int) -> None:
        self.ids, self.starts, self.batch_size = ids, starts, batch_size
        self.length, self.n = length, n_batches

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tensor:  # type: ignore[override]
        if not 0 <= i < self.n:
            raise IndexError(i)
        return windows(self.ids, self.starts[i * self.batch_size : (i + 1) * self.batch_size], self.length)
