"""Pretrained word vectors as a run's input embedding (translation's source, a classifier's or
tagger's BERT encoder), from ``--word-vectors FILE`` with a word-level tokenizer.

The vectors' vocabulary is intersected with the tokenizer's (the training text's words): the row of
each word found (as it is, else lowercased) is its vector; the other rows, and the special tokens',
keep the model's initialisation. Vectors of another width than d_model set ``model.word_dim``, so
that the embedding is a (vocab, word_dim) table projected to d_model (saved with the run).
``--freeze-embeddings`` keeps the table fixed: it is left out of the optimizer (the projection,
positions and everything else still train).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.data.config import WordVectorsData
from vaswani.data.vectors import read_word_vectors
from vaswani.layers.embedding import Embeddings
from vaswani.tokenizer import TokenizerFile


@dataclass(frozen=True)
class EmbeddingRows:
    """The embedding rows ``ids`` (n,) to set to ``values`` (n, dim), and the line counting them."""

    ids: Tensor
    values: Tensor
    dim: int
    report: str


def embedding_rows(spec: WordVectorsData, tokenizer: TokenizerFile, d_model: int) -> EmbeddingRows:
    """The rows of ``tokenizer``'s words that the file ``spec.word_vectors`` has a vector for."""
    assert spec.word_vectors is not None
    specials = set(tokenizer.tokenizer.get_added_tokens_decoder())
    words = {word: i for word, i in tokenizer.tokenizer.get_vocab().items() if i not in specials}
    wanted = set(words) | {word.lower() for word in words}
    vectors = read_word_vectors(spec.word_vectors, spec.word_vectors_format, wanted)
    found = {i: vectors.vectors.get(word, vectors.vectors.get(word.lower())) for word, i in words.items()}
    rows = sorted(i for i, vector in found.items() if vector is not None)
    projected = f"; projected to d_model {d_model}" if vectors.dim != d_model else ""
    report = (
        f"word vectors: {len(rows):,} of the {len(words):,} words of the vocabulary found in "
        f"{spec.word_vectors} ({vectors.format}, {vectors.rows:,} words of {vectors.dim} dimensions"
        f"{projected}), {len(words) - len(rows):,} initialised as usual"
    )
    values = torch.stack([found[i] for i in rows]) if rows else torch.empty(0, vectors.dim)
    return EmbeddingRows(torch.tensor(rows, dtype=torch.long), values, vectors.dim, report)


def sized_for(model: ModelConfig, rows: EmbeddingRows | None) -> ModelConfig:
    """``model`` with ``word_dim`` set when the vectors are not d_model wide."""
    if rows is None or rows.dim == model.d_model:
        return model
    return model.replace(word_dim=rows.dim)


def with_word_vectors(
    build: Callable[[], nn.Module],
    embedding_of: Callable[[nn.Module], Embeddings],
    rows: EmbeddingRows | None,
    freeze: bool,
) -> Callable[[], nn.Module]:
    """``build`` followed by setting the word table's ``rows`` (when given: a new run) and, with
    ``freeze``, fixing the table (``requires_grad`` off: the optimizer leaves it out)."""

    def built() -> nn.Module:
        model = build()
        if rows is None and not freeze:  # nothing to set (a model without such a table: the RNN)
            return model
        table = embedding_of(model).token.weight
        if rows is not None:
            with torch.no_grad():
                table[rows.ids] = rows.values.to(table.dtype)
        if freeze:
            table.requires_grad_(False)
        return model

    return built
