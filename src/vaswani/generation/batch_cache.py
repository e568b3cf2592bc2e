"""The caches of a continuous batch (:mod:`~vaswani.generation.continuous`), regrouped as rows join
and leave: each row's keys and values right-aligned on the most tokens any row holds, the columns
before a row's own zeros (masked by the key mask).

A batch decodes on growing caches (:class:`~vaswani.layers.cache.KVCache`, a rolling one in
windowed layers), or, when its steps are compiled, on static caches
(:class:`~vaswani.layers.cache.StaticKVCache`) whose rows are padded to a power of two and whose
columns leave room for the steps to come (:func:`~vaswani.generation.compiled.bucket`): one graph
then serves every step until the batch is regrouped.
"""

from __future__ import annotations

import torch
from torch import Tensor

from vaswani.layers.blocks import LayerCache
from vaswani.layers.cache import AttentionCache, RollingKVCache, StaticKVCache


def kept_rows(cache: AttentionCache | None, index: Tensor) -> list[tuple[Tensor, Tensor]]:
    """The keys and values of the rows ``index`` of ``cache``: one part of :func:`fill` ([] when no
    row is kept)."""
    if cache is None or not index.numel():
        return []
    return parts([cache], index)


def parts(caches: list[AttentionCache], index: Tensor | None = None) -> list[tuple[Tensor, Tensor]]:
    """The keys and values each of ``caches`` holds (its rows ``index`` if given; of a static cache,
    the columns written so far), parts of :func:`fill`."""
    found = []
    for cache in caches:
        key, value = cache.key, cache.value
        assert key is not None and value is not None
        if isinstance(cache, StaticKVCache):
            written = int(cache.position)
            key, value = key[:, :, :written], value[:, :, :written]
        if index is not None:
            key, value = key.index_select(0, index), value.index_select(0, index)
        found.append((key, value))
    return found


def suffix_mask(lengths: list[int], width: int, device: torch.device) -> Tensor:
    """(rows, width) True on the newest ``lengths[i]`` columns of row i: its tokens."""
    starts = torch.tensor([width - n for n in lengths], dtype=torch.long, device=device)
    return torch.arange(width, device=device) >= starts[:, None]


def static_mask(cached: list[int], width: int, columns: int, padded: int, device: torch.device) -> Tensor:
    """The key mask (``padded``, ``columns``) of a continuous batch on static caches: row i holds its
    ``cached[i]`` tokens in the columns before ``width`` (right-aligned), and the columns from
    ``width`` on are the steps to come, True (the causal mask hides those not yet written); the
    rows of padding after them are True throughout (never read). It stays the same from step to
    step, as every row's tokens and the cache's position advance together."""
    to_come = columns - width
    return suffix_mask([n + to_come for n in cached] + [columns] * (padded - len(cached)), columns, device)


def fill(
    target: AttentionCache, parts: list[tuple[Tensor, Tensor]], width: int, rows: int | None = None
) -> None:
    """Fill an empty cache with the rows of ``parts`` ((rows, heads, kept, d_head) keys and values,
    the newest last), right-aligned on ``width`` columns, the columns before a row's zeros (masked),
    and rows of zeros after them up to ``rows``. A rolling cache keeps at most its window (and no
    more than ``width``) and counts ``width``; a static cache gets them in its first ``width``
    columns (its shared position is advanced once for every layer: :func:`advance`)."""
    kept = width
    if isinstance(target, RollingKVCache):
        kept = min(width, max(key.shape[2] for key, _ in parts))
    (first_key, first_value) = parts[0]
    rows = rows or sum(key.shape[0] for key, _ in parts)
    key = first_key.new_zeros(rows, first_key.shape[1], kept, first_key.shape[3])
    value = first_value.new_zeros(rows, first_value.shape[1], kept, first_value.shape[3])
    row = 0
    for part_key, part_value in parts:
        n, have = part_key.shape[0], min(part_key.shape[2], kept)
        key[row : row + n, :, kept - have :] = part_key[:, :, part_key.shape[2] - have :]
        value[row : row + n, :, kept - have :] = part_value[:, :, part_value.shape[2] - have :]
        row += n
    target.append(key, value)
    if not isinstance(target, StaticKVCache):
        target.length = width


def advance(cache: list[LayerCache], width: int) -> None:
    """Count the ``width`` columns :func:`fill` wrote into static caches as written (their position
    is shared by every layer: advanced once); nothing for growing caches."""
    first = cache[0].self_attn
    if isinstance(first, StaticKVCache):
        first.advance(width)


def right_aligned(pieces: list[Tensor], columns: int, rows: int | None = None) -> Tensor:
    """The rows of ``pieces`` ((rows, length, ...) each, length <= ``columns``, or more, whose
    newest ``columns`` are kept) stacked, each right-aligned on ``columns`` columns after zeros
    (False for a mask), and rows of zeros after them up to ``rows``."""
    rows = rows or sum(p.shape[0] for p in pieces)
    out = pieces[0].new_zeros(rows, columns, *pieces[0].shape[2:])
    row = 0
    for piece in pieces:
        have = min(piece.shape[1], columns)
        out[row : row + piece.shape[0], columns - have :] = piece[:, piece.shape[1] - have :]
        row += piece.shape[0]
    return out
