"""Token embeddings combined with absolute positions."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from vaswani.errors import InputError
from vaswani.layers.linear import Linear


def reads_values(t: Tensor) -> bool:
    """Whether a check may read the values of ``t`` on the host: only where they already are
    there (the CPU), and not while ``torch.compile`` traces (a read would break its graph). On an
    accelerator a read would wait for the device at every call (every layer, every decoding
    step); the embedding lookup checks its indices there itself (a device-side assert), and the
    wrappers check the user's input before it is moved (:mod:`vaswani.tasks`)."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def check_ids(ids: Tensor, size: int, what: str, table: str) -> None:
    """Refuse ids outside ``0 … size - 1`` with :class:`InputError`, naming the first offender,
    its index and the size (an ``nn.Embedding`` would raise a bare ``IndexError`` on the CPU and
    a device-side assert on a GPU)."""
    outside = (ids < 0) | (ids >= size)
    if bool(outside.any()):
        index = outside.nonzero()[0].tolist()
        value = int(ids[tuple(index)])
        raise InputError(f"{what} id {value} at {index} is outside {table} of {size} (ids 0 to {size - 1})")


class Embeddings(nn.Module):
    """x = Dropout(Norm(E[token] · sqrt(d_model) + P[position] + S[segment])).

    With ``word_dim`` (pretrained word vectors of another width) the table E is (vocab, word_dim)
    and E[token] is projected to d_model by a linear map without bias, E[token] W_p.

    Token ids ``(batch, seq)`` → vectors ``(batch, seq, d_model)``; a batch of no rows or of no
    tokens gives the empty result of that shape. An id outside the embedding, or a position past
    ``max_len``, is an :class:`~vaswani.errors.InputError` where the ids are on the CPU (see
    :func:`reads_values`).

    The sqrt(d_model) scale is the paper's (section 3.4); BERT and GPT-2 leave
    it out (``scale=False``). ``positions`` is the absolute table of
    :func:`~vaswani.layers.positions.embedding_positions`, None for schemes that act in attention.
    BERT adds the segment (token type) embedding S of ``n_segments`` rows and
    normalises the sum (``norm``); without them S and Norm are left out.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        positions: nn.Module | None,
        dropout: float,
        scale: bool = True,
        token: nn.Embedding | None = None,
        n_segments: int = 0,
        norm: nn.Module | None = None,
        word_dim: int | None = None,
    ) -> None:
        super().__init__()
        self.token = token if token is not None else nn.Embedding(vocab_size, word_dim or d_model)
        self.project = Linear(word_dim, d_model, bias=False) if word_dim is not None else None
        self.positions = positions
        self.segment = nn.Embedding(n_segments, d_model) if n_segments else None
        self.norm = norm
        self.scale = math.sqrt(d_model) if scale else 1.0
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        offset: int = 0,
        segments: Tensor | None = None,
    ) -> Tensor:
        """``positions`` (batch, seq) overrides the default ``offset, offset+1, …``
        (left-padded prompts take theirs from the attention mask). ``segments`` (batch, seq)
        are the segment ids (all 0 when None) of a model with segment embeddings."""
        if reads_values(tokens):
            check_ids(tokens, self.token.num_embeddings, "token", "the vocabulary")
        x = self.token(tokens) if self.project is None else self.project(self.token(tokens))
        x = x * self.scale
        if self.positions is not None:
            if positions is None:
                last = offset + tokens.shape[1] - 1  # known without reading the tensor back
                positions = torch.arange(offset, last + 1, device=tokens.device)
            else:  # -1: not read here, the table lookup checks them on the device
                last = int(positions.max()) if positions.numel() and reads_values(positions) else -1
            if last >= self.positions.max_len:
                raise InputError(f"sequence of {last + 1} positions exceeds max_len={self.positions.max_len}")
            x = x + self.positions(positions)
        if self.segment is not None:
            if segments is None:
                x = x + self.segment.weight[0]
            else:
                if reads_values(segments):
                    check_ids(segments, self.segment.num_embeddings, "segment", "the segment embeddings")
                x = x + self.segment(segments)
        elif segments is not None:
            raise InputError("segment ids given to a model without segment embeddings (type_vocab_size 0)")
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)
