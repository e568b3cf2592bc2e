"""Batches built by token count with length bucketing; the padding travels with the batch."""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Seq2SeqBatch:
    """A padded batch for teacher forcing.

    ``src`` (batch, src_len); ``tgt_in`` = BOS y_1 … y_n and ``tgt_out`` = y_1 … y_n EOS,
    both (batch, tgt_len); padding is ``pad_id``, so the padding mask is ``src != pad_id``.
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    pad_id: int

    @property
    def n_tokens(self) -> int:
        """Target tokens that count in the loss."""
        return int((self.tgt_out != self.pad_id).sum())

    @property
    def n_src_tokens(self) -> int:
        return int((self.src != self.pad_id).sum())


def pad(rows: Sequence[Sequence[int]], pad_id: int) -> Tensor:
    """(batch, max_len) int64, right-padded with ``pad_id``."""
    out = torch.full((len(rows), max((len(r) for r in rows), default=0)), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def seq2seq_batch(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], bos_id: int, eos_id: int, pad_id: int
) -> Seq2SeqBatch:
    """Pad (source ids, target ids) pairs; the target gets BOS in front for the input and
    EOS behind for the output (teacher forcing: the decoder input is the target shifted right)."""
    src = pad([s for s, _ in pairs], pad_id)
    tgt_in = pad([[bos_id, *t] for _, t in pairs], pad_id)
    tgt_out = pad([[*t, eos_id] for _, t in pairs], pad_id)
    return Seq2SeqBatch(src, tgt_in, tgt_out, pad_id)


def token_buckets(lengths: Sequence[int], batch_tokens: int, seed: int = 0) -> list[list[int]]:
    """Group example indices into batches of at most ``batch_tokens`` padded tokens.

    Examples are sorted by length (ties broken by a seeded shuffle) so that
    each batch holds examples of similar length and little padding; a batch
    grows while ``len(batch) · longest <= batch_tokens``. An example longer
    than ``batch_tokens`` gets a batch of its own.
    """
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if current and (len(current) + 1) * new_longest > batch_tokens:
            batches.append(current)
            current, new_longest = [], lengths[i]
        current.append(i)
        longest = new_longest
    if current:
        batches.append(current)
    return batches


@functools.lru_cache(maxsize=2)
def epoch_order(n_batches: int, seed: int, epoch: int) -> tuple[int, ...]:
    """The order of the batches in one epoch: a shuffle that depends only on (seed, epoch),
    so that a resumed run sees the same batches in the same order (cached: it is asked for
    at every step)."""
    order = list(range(n_batches))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return tuple(order)


def length_batches(lengths: Sequence[int], batch_size: int, seed: int) -> list[list[int]]:
    """Batches of ``batch_size`` examples of similar length (little padding): the examples are
    shuffled by ``seed``, sorted by length (a stable sort keeps the shuffle among equals) and
    cut in order; the trainer shuffles the batches."""
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    order.sort(key=lambda i: lengths[i])
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
