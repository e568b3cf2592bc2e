"""The KV caches of attention layers: keys and values kept between decoding steps.

:class:`KVCache` keeps every key (full attention, cross-attention) and grows with the sequence;
:class:`RollingKVCache` keeps only the keys that a causal window can still reach, so that its
memory is constant in the generated length. Both hold (batch, heads, ·, d_head) tensors and count
in ``length`` every token seen, which is where the next tokens' positions continue.
:class:`StaticKVCache` allocates ``max_len`` columns once and writes each step at a position kept
in a tensor, so that the shapes of a decoding step never change (``torch.compile`` with
``dynamic=False``, :mod:`vaswani.generation.compiled`).

Both keep their keys in the order of the sequence, the newest last: self-attention over a cache
sees the newest ``k_len`` keys of the sequence, and cuts the key columns of its mask and position
ids to them (:func:`newest_keys`).
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of one attention layer kept between decoding steps.

    Self-attention appends the new step's keys and values; cross-attention
    fills it once from the encoder output and reuses it. Keys and values live in
    buffers (batch, heads, capacity, d_head) that grow by doubling, so a step
    writes only its own slice instead of copying the whole history.
    """

    def __init__(self) -> None:
        self._key: Tensor | None = None
        self._value: Tensor | None = None
        self.length = 0

    @property
    def key(self) -> Tensor | None:
        return None if self._key is None else self._key[:, :, : self.length]

    @property
    def value(self) -> Tensor | None:
        return None if self._value is None else self._value[:, :, : self.length]

    @property
    def nbytes(self) -> int:
        """Bytes of the key and value buffers (their whole capacity)."""
        return _nbytes(self._key, self._value)

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add (batch, heads, new, d_head) keys and values; return all of them so far."""
        end = self.length + key.shape[2]
        if self._key is None or self._value is None or end > self._key.shape[2]:
            capacity = max(end, 2 * self.length, 16)
            grown_key = key.new_empty(*key.shape[:2], capacity, key.shape[3])
            grown_value = value.new_empty(*value.shape[:2], capacity, value.shape[3])
            if self._key is not None and self._value is not None:
                grown_key[:, :, : self.length] = self._key[:, :, : self.length]
                grown_value[:, :, : self.length] = self._value[:, :, : self.length]
            self._key, self._value = grown_key, grown_value
        self._key[:, :, self.length : end] = key
        self._value[:, :, self.length : end] = value
        self.length = end
        return self._key[:, :, :end], self._value[:, :, :end]

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows ``index`` (beam search, dropping finished rows)."""
        if self._key is not None and self._value is not None:
            self._key = _select(self._key, index, 0, self.length)
            self._value = _select(self._value, index, 0, self.length)

    def truncate(self, length: int) -> None:
        """Forget every key after the first ``length`` (speculative decoding's rejected tokens):
        the next append writes over them."""
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} keys to {length}")
        self.length = length


class RollingKVCache:
    """The KV cache of causal self-attention with a window of ``window`` keys back.

    Under the window convention of :func:`~vaswani.layers.masks.window_mask` (query i attends
    key j iff 0 <= i − j <= w) a query sees itself and the w keys before it, so between steps the
    cache keeps the newest w keys; :meth:`append` returns them followed by the new ones (w + 1
    keys for one new token). Older keys are forgotten.

    Storage is a fixed buffer (batch, heads, capacity, d_head), capacity = w + max(1, w // 4)
    (allocated by doubling up to it), in which the kept keys are one contiguous run in sequence
    order: a step writes its key after them and attends to a view, and when the buffer's end is
    reached the w kept keys are copied to its front (w keys every w // 4 steps: about 4 a step
    on average, beside the one a step writes). A ring of w + 1 slots would take a fifth less
    memory but hold the keys out of order, so every step would have to gather the padding mask
    and the position ids into the ring's order, and the window and causal masks (and any banded
    computation) would no longer apply as they are; here the kept keys are always the newest of
    the sequence and :func:`newest_keys` cuts the rest to match. A prompt longer than the buffer
    is attended as a whole (a temporary tensor) and only its newest w keys are kept.
    """

    def __init__(self, window: int) -> None:
        if window < 1:
            raise ValueError(f"attn_window must be >= 1, got {window}")
        self.window = window
        self.capacity = window + max(1, window // 4)
        self._key: Tensor | None = None
        self._value: Tensor | None = None
        self._start = 0  # the kept keys are buffer positions [_start, _end)
        self._end = 0
        self.length = 0

    @property
    def key(self) -> Tensor | None:
        """The kept keys (batch, heads, ≤ window, d_head), oldest first."""
        return None if self._key is None else self._key[:, :, self._start : self._end]

    @property
    def value(self) -> Tensor | None:
        """The kept values (batch, heads, ≤ window, d_head), oldest first."""
        return None if self._value is None else self._value[:, :, self._start : self._end]

    @property
    def nbytes(self) -> int:
        """Bytes of the key and value buffers (their whole capacity)."""
        return _nbytes(self._key, self._value)

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Add (batch, heads, new, d_head) keys and values; return the kept ones and the new ones,
        (batch, heads, kept + new, d_head) in sequence order, kept ≤ window."""
        new = key.shape[2]
        buffers = self._key, self._value
        if buffers[0] is None or buffers[1] is None or self._end + new > buffers[0].shape[2]:
            buffers = self._make_room(key, value, new)
        key_buffer, value_buffer = buffers
        self.length += new
        end = self._end + new
        if end > key_buffer.shape[2]:  # more new keys than the buffer holds besides the kept ones
            keys = torch.cat([key_buffer[:, :, self._start : self._end], key], dim=2)
            values = torch.cat([value_buffer[:, :, self._start : self._end], value], dim=2)
            kept = min(self.window, keys.shape[2])
            key_buffer[:, :, :kept] = keys[:, :, -kept:]
            value_buffer[:, :, :kept] = values[:, :, -kept:]
            self._start, self._end = 0, kept
            return keys, values
        key_buffer[:, :, self._end : end] = key
        value_buffer[:, :, self._end : end] = value
        keys, values = key_buffer[:, :, self._start : end], value_buffer[:, :, self._start : end]
        self._start, self._end = max(self._start, end - self.window), end
        return keys, values

    def _make_room(self, key: Tensor, value: Tensor, new: int) -> tuple[Tensor, Tensor]:
        """Move the kept keys to the front of the buffer, first growing it (by doubling, up to
        ``capacity``) while it is smaller, and return the buffers: the ``new`` keys then fit after
        the kept ones unless kept + new > capacity."""
        kept = self._end - self._start
        old_key, old_value = self._key, self._value
        key_buffer, value_buffer = old_key, old_value
        size = 0 if old_key is None else old_key.shape[2]
        if key_buffer is None or value_buffer is None or size < self.capacity:
            size = min(self.capacity, max(kept + new, 2 * size, 16))
            key_buffer = key.new_empty(*key.shape[:2], size, key.shape[3])
            value_buffer = value.new_empty(*value.shape[:2], size, value.shape[3])
        if old_key is not None and old_value is not None and kept:
            kept_key = old_key[:, :, self._start : self._end]
            kept_value = old_value[:, :, self._start : self._end]
            if old_key is key_buffer:  # in place: the kept run and the front may overlap
                kept_key, kept_value = kept_key.clone(), kept_value.clone()
            key_buffer[:, :, :kept] = kept_key
            value_buffer[:, :, :kept] = kept_value
        self._key, self._value = key_buffer, value_buffer
        self._start, self._end = 0, kept
        return key_buffer, value_buffer

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows ``index`` (beam search, dropping finished rows)."""
        if self._key is not None and self._value is not None:
            self._key = _select(self._key, index, self._start, self._end)
            self._value = _select(self._value, index, self._start, self._end)


class StaticKVCache:
    """The KV cache of causal self-attention in a buffer of ``max_len`` columns, allocated once.

    Keys and values live in zero-filled buffers (batch, heads, max_len, d_head), allocated at the
    first :meth:`append` (which fixes the batch, heads, dtype and device); the tokens fed so far fill
    the columns [0, ``position``). ``position`` is a 0-dim long tensor on the model's device, shared
    by every layer of a model's cache (:meth:`~vaswani.layers.blocks.BlockStack.new_cache`): an
    append writes the new keys at columns ``position, position + 1, …`` (``index_copy_``, no host
    read) and returns the whole buffers; attention masks the columns a query may not see (those
    after it, and outside its window: :func:`~vaswani.layers.masks.placed_mask`), and the stack
    advances ``position`` once its layers have appended (:meth:`advance`). Nothing here is a
    Python number that changes, so a step traced once serves every later step.
    """

    def __init__(self, max_len: int, position: Tensor) -> None:
        if max_len < 1:
            raise ValueError(f"a static cache needs max_len >= 1, got {max_len}")
        self.max_len = max_len
        self.position = position
        self._key: Tensor | None = None
        self._value: Tensor | None = None

    @property
    def key(self) -> Tensor | None:
        """The whole key buffer (batch, heads, max_len, d_head); columns from ``position`` on are 0."""
        return self._key

    @property
    def value(self) -> Tensor | None:
        """The whole value buffer (batch, heads, max_len, d_head)."""
        return self._value

    @property
    def nbytes(self) -> int:
        """Bytes of the key and value buffers."""
        return _nbytes(self._key, self._value)

    def columns(self, new: int) -> Tensor:
        """The buffer columns (new,) of the next ``new`` tokens: ``position`` + 0, 1, …"""
        return self.position + torch.arange(new, device=self.position.device)

    def append(self, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Write (batch, heads, new, d_head) keys and values at :meth:`columns`; return the whole
        buffers (batch, heads, max_len, d_head)."""
        self.reserve(key, value)
        at = self.columns(key.shape[2])
        self._key.index_copy_(2, at, key)
        self._value.index_copy_(2, at, value)
        return self._key, self._value

    def reserve(self, key: Tensor, value: Tensor) -> None:
        """Allocate the buffers for keys and values like ``key`` and ``value`` (batch, heads, any,
        d_head: their batch, heads, d_head, dtype and device), unless they are: what the first
        :meth:`append` does, done before it so that the first step finds the cache as every later
        step does (one compiled graph for all)."""
        if self._key is None or self._value is None:
            self._key = key.new_zeros(*key.shape[:2], self.max_len, key.shape[3])
            self._value = value.new_zeros(*value.shape[:2], self.max_len, value.shape[3])

    def advance(self, new: int) -> None:
        """Count ``new`` more tokens as fed (in place: every layer sharing ``position`` sees it)."""
        self.position.add_(new)

    def reorder(self, index: Tensor) -> None:
        """Keep the batch rows ``index`` (beam search), copying only the filled columns [0,
        ``position``) (:func:`_keep_filled`)."""
        if self._key is not None and self._value is not None:
            filled = int(self.position)  # a read of the device, as beam search makes one a step
            self._key = _keep_filled(self._key, index, filled)
            self._value = _keep_filled(self._value, index, filled)


def _keep_filled(buffer: Tensor, index: Tensor, filled: int) -> Tensor:
    """A static buffer (rows, heads, max_len, d_head) holding the rows ``index`` of ``buffer``, of
    which only the first ``filled`` columns are copied: the columns after them are 0 in every row
    (no append has reached them yet), so where there are no more rows than before the buffer's
    first rows are reused in place, and only a buffer of more rows (the first step's beams) is new.
    Compiled beam search on the transformer-base shape (random weights, 32 sources, beam 4, 48
    steps in a buffer of 64 columns, 2 threads, in turn in one process): 3.76 → 3.26 s and 3.46 →
    3.11 s (eager: 2.96-3.07 s); a short sentence fills fewer of the columns still."""
    kept = buffer[:, :, :filled].index_select(0, index)
    rows = index.shape[0]
    out = buffer[:rows] if rows <= buffer.shape[0] else buffer.new_zeros(rows, *buffer.shape[1:])
    out[:, :, :filled] = kept
    return out


AttentionCache = KVCache | RollingKVCache | StaticKVCache
"""What a self- or cross-attention layer decodes with (:meth:`MultiHeadAttention.new_cache`)."""


def newest_keys(mask: Tensor | None, positions: Tensor | None, k_len: int) -> tuple[Tensor | None, ...]:
    """The key columns of a self-attention ``mask`` (…, cached + q_len) and of the keys' position
    ids ``positions`` (batch | 1, cached + q_len) cut to the newest ``k_len``: those of the keys a
    cache returned (all of them from a :class:`KVCache`, unchanged then). A mask column of size 1
    (broadcast) stays."""
    if mask is not None and mask.shape[-1] > k_len:
        mask = mask[..., -k_len:]
    if positions is not None and positions.shape[-1] > k_len:
        positions = positions[:, -k_len:]
    return mask, positions


def _nbytes(*buffers: Tensor | None) -> int:
    return sum(b.numel() * b.element_size() for b in buffers if b is not None)


def _select(buffer: Tensor, index: Tensor, start: int, end: int) -> Tensor:
    """A new buffer of the same capacity holding, at the same places, the rows ``index`` of the
    filled part [start, end): only that part is copied (``index_select`` into the slice, several
    times faster than indexing the whole buffer)."""
    kept = buffer.new_empty(index.shape[0], *buffer.shape[1:])
    torch.index_select(buffer[:, :, start:end], 0, index, out=kept[:, :, start:end])
    return kept


def new_positions(
    cache: AttentionCache | None, positions: Tensor | None, new: int
) -> tuple[Tensor | None, int]:
    """The position ids of ``new`` tokens fed after what ``cache`` (a layer's self-attention cache,
    or None) holds, and the offset an embedding adds without them: with ``positions`` (batch, all
    columns so far, from an attention mask), their columns (the next ones of a static cache, else
    the last ``new``); without, a static cache's next columns, else None and the cached length."""
    if isinstance(cache, StaticKVCache):
        columns = cache.columns(new)
        return (columns[None] if positions is None else positions.index_select(1, columns)), 0
    offset = cache.length if cache is not None else 0
    return (None if positions is None else positions[:, offset:]), offset
