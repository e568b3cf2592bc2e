"""Continuous batching of an encoder-decoder (a translation model): translation requests join and
leave a running batch at step boundaries, so that a long translation does not hold back short ones.

The requests joining at a step are encoded together (their sources in one pass of the encoder,
padded after their ends) and their first target tokens decoded together from BOS, which fills their
decoder caches: self-attention (one column, BOS) and cross-attention (the keys and values of the
sources); each request's rows are then cut out to its own source. They join the running batch's,
as in :class:`~vaswani.generation.continuous.ContinuousEngine`: the decoder's self-attention caches
left-padded (each row's tokens the newest columns; a target key mask gives each row its position
ids, :meth:`Transformer.decode`'s ``target_mask``), the cross-attention caches and the encoder
output padded to the longest source in the batch, with the memory key mask marking each row's
source. A finished or cancelled row leaves, and the caches are regrouped in one copy: columns that
no row needs any more (a longer past of the rows that left, a longer source) are dropped.

Each request keeps its :class:`DecodingConfig` (greedy or sampled) and its own generator (seeded
by ``decoding.seed``), and gets what :func:`~vaswani.generation.seq2seq.translate_ids` gives its
source alone: the same budget (:meth:`DecodingConfig.target_budget`), the ids of ``suppress``
never chosen. Beam search (n-best) keeps its one-shot path, :func:`translate_beam_ids`.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from vaswani.errors import ConfigError, DataError, InputError
from vaswani.generation.batch_cache import advance, fill, kept_rows, parts, right_aligned
from vaswani.generation.compiled import CompiledDecoding, bucket, seq2seq_batch_logits
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.continuous import BatchEngine
from vaswani.generation.request import Decode, Request
from vaswani.layers.blocks import LayerCache
from vaswani.layers.cache import KVCache
from vaswani.models.transformer import EncodedSource, Transformer


class Seq2SeqEngine(BatchEngine[EncodedSource]):
    """Continuous batching of ``model`` (a :class:`Transformer`) for up to ``max_batch`` rows at
    once, decoding from ``bos_id`` to ``eos_id``; ``max_pending`` requests may wait for a slot
    (None: any number); ``on_step(rows)`` is told the rows of each step (a server's batch sizes).

    ``engine.submit(source_ids, decoding) -> Request`` (its ``prompt`` is the source);
    :meth:`step` advances every running request by one token (called by :meth:`start`'s thread,
    or directly). ``decode`` turns target ids into text; the ids in ``suppress`` are never chosen
    (:attr:`Translator.suppressed`). Every tensor stays on the model's device; a step reads it once
    (the new ids).
    """

    def __init__(
        self, model: Transformer, bos_id: int, eos_id: int, decode: Decode, suppress: Sequence[int] = (),
        max_batch: int = 8, max_pending: int | None = None, on_step: Callable[[int], None] | None = None,
        compiled: CompiledDecoding | None = None,
    ) -> None:  # fmt: skip
        device = next(model.parameters()).device
        super().__init__(device, eos_id, decode, max_batch, max_pending, on_step, compiled)
        self.model = model.eval()
        self.bos_id = bos_id
        self.suppress = torch.tensor(list(suppress), dtype=torch.long, device=self.device)
        # The batch's sources, right-aligned on the longest: encoder output (rows, columns, d_model)
        # and which columns are each row's source (rows, columns).
        self.memory: Tensor | None = None
        self.memory_mask: Tensor | None = None

    def submit(
        self, source_ids: Sequence[int], decoding: DecodingConfig = GREEDY,
        on_event: Callable[[Request], None] | None = None,
    ) -> Request:  # fmt: skip
        """Queue the translation of ``source_ids`` as ``decoding`` says (greedy or sampled);
        ``on_event(request)`` is called from the engine's thread after each new token and at the
        end. A source longer than the model's max_len is a DataError, an id outside the source
        vocabulary an InputError, beam search or stop strings a ConfigError, a full queue
        QueueFull."""
        if decoding.strategy == "beam":
            raise ConfigError("decoding.beam: beam search runs one-shot (translate_beam_ids), not in a batch")
        if decoding.stop:
            raise ConfigError("decoding.stop applies to language models: a translation ends at EOS")
        cfg = self.model.config
        source = [int(i) for i in source_ids]
        if len(source) > cfg.max_len:
            raise DataError(f"input: {len(source)} tokens exceed the model's max_len={cfg.max_len}")
        if not all(0 <= i < cfg.src_vocab_size for i in source):
            raise InputError(f"input: token ids must be in [0, {cfg.src_vocab_size})")
        budget = int(decoding.target_budget(torch.tensor([len(source)]), cfg.max_len)[0])
        generator = decoding.generator(self.device)
        request = Request(
            source, decoding, budget, self.eos_id, self.decode, generator, on_event, tokens=[self.bos_id]
        )
        return self._enqueue(request)

    def _logits(self, tokens: Tensor, source: EncodedSource, target_mask: Tensor | None) -> Tensor:
        logits = self.model.decode(tokens, source, last_only=True, target_mask=target_mask)[0][:, -1]
        return self._suppressed(logits)

    def _suppressed(self, logits: Tensor) -> Tensor:
        """``logits`` in float32, those of the ids in ``suppress`` -inf."""
        logits = logits.float()
        if self.suppress.numel():
            logits.index_fill_(-1, self.suppress, -math.inf)
        return logits

    def _prefill_rows(self, rows: list[Request]) -> list[tuple[Request, EncodedSource, int]]:
        """The rows that join at a step prefilled together (:meth:`_prefill_together`), or each
        alone when they are one or when that pass fails (a request whose own prefill fails then
        ends alone)."""
        if len(rows) > 1:
            with contextlib.suppress(Exception):  # redone one at a time: each failure is then its row's
                return self._prefill_together(rows)
        return super()._prefill_rows(rows)

    def _prefill_together(self, rows: list[Request]) -> list[tuple[Request, EncodedSource, int]]:
        """The sources of ``rows`` encoded in one pass (padded after their ends, the padding masked)
        and their first tokens decoded in one step from BOS; each row's encoded source is its own
        rows of the memory, the mask and the caches (:func:`row_sources`). Under 16 clients of
        one-sentence translations about three requests join a step, each of which was an encoder
        pass and a decoder step of its own."""
        pad = self.model.config.pad_id
        longest = max(len(r.prompt) for r in rows)
        src = [r.prompt + [pad] * (longest - len(r.prompt)) for r in rows]
        source = self.model.start_decoding(torch.tensor(src, dtype=torch.long, device=self.device))
        start = torch.tensor([r.tokens for r in rows], dtype=torch.long, device=self.device)
        logits = self._logits(start, source, None)
        states = row_sources(source, [len(r.prompt) for r in rows])
        tokens = self._choose(logits, rows)  # last: a pass redone alone must find the generators untouched
        for row in rows:
            row.cached = len(row.tokens)
        return list(zip(rows, states, tokens, strict=True))

    def _prefill(self, row: Request) -> tuple[EncodedSource, int]:
        """The row's source encoded alone and its first token decoded from BOS: its encoded source
        (with its caches) and next token."""
        src = torch.tensor([row.prompt], dtype=torch.long, device=self.device)
        source = self.model.start_decoding(src)
        start = torch.tensor([row.tokens], dtype=torch.long, device=self.device)
        token = self._choose(self._logits(start, source, None), [row])[0]
        row.cached = len(row.tokens)
        return source, token

    def _decode_batch(self) -> list[int]:
        """One step of the running batch: each row's newest token, with the target key mask of the
        rows' tokens (left out when no row is padded; through the compiled step, the static caches'
        mask) and the memory mask of their sources."""
        assert self.memory is not None and self.memory_mask is not None
        source = EncodedSource(self.memory, self.memory_mask[:, None, None, :], self.cache)
        newest = torch.tensor([[r.tokens[-1]] for r in self.rows], dtype=torch.long, device=self.device)
        if self.compiled is None:
            logits = self._logits(newest, source, self._self_attention_mask())
        else:
            assert self.static_mask is not None
            step = seq2seq_batch_logits(self.compiled, self.model, newest, source, self.static_mask)
            logits = self._suppressed(step)
        tokens = self._choose(logits, self.rows)
        self.width += 1
        for row in self.rows:
            row.cached += 1
        return tokens

    def _rebuild(
        self, keep: list[Request], joining: list[tuple[Request, EncodedSource]], rows: list[Request]
    ) -> None:
        """The batch of the rows ``keep`` (running, in their order) and ``joining`` (each with its
        encoded source and caches): one cache per layer, the self-attention rows right-aligned on
        the most tokens any holds, the sources (cross-attention caches, encoder output, mask)
        right-aligned on the longest. When the steps are compiled, the self-attention caches are
        static, the rows padded and the sources' columns a power of two (at least 8)."""
        width = max(r.cached for r in rows)
        columns = max(len(r.prompt) for r in rows)
        shape = self._static_shape(len(rows), width, self.model.config.max_len)
        padded, static = (None, None) if shape is None else shape
        columns = columns if shape is None else bucket(columns, 8)
        index = self._kept(keep)
        joined = [s.cache for _, s in joining]
        memory, mask = [s.memory for _, s in joining], [s.mask[:, 0, 0] for _, s in joining]
        if keep:
            assert self.memory is not None and self.memory_mask is not None
            memory.insert(0, self.memory.index_select(0, index))
            mask.insert(0, self.memory_mask.index_select(0, index))
        cache = self.model.decoder.new_cache(static)
        for layer, target in enumerate(cache):
            running = self.cache[layer] if self.cache else None
            own = [c[layer] for c in joined if c is not None]  # every prefilled source has its caches
            held = kept_rows(None if running is None else running.self_attn, index)
            fill(target.self_attn, held + parts([c.self_attn for c in own]), width, padded)
            held = kept_rows(None if running is None else running.cross_attn, index)
            fill(target.cross_attn, held + parts([c.cross_attn for c in own]), columns, padded)
        advance(cache, width)
        self.memory, self.memory_mask = (
            right_aligned(memory, columns, padded),
            right_aligned(mask, columns, padded),
        )
        self.memory_mask[len(rows) :] = True  # rows of padding read zeros, not nothing
        self.cache = cache
        self._placed(rows, width, shape)

    def _clear(self) -> None:
        super()._clear()
        self.memory = self.memory_mask = None


def row_sources(source: EncodedSource, lengths: list[int]) -> list[EncodedSource]:
    """Each row of a prefilled ``source`` (its sources padded after their ends) as the encoded
    source of that row alone: its first ``lengths[i]`` columns of the memory, the mask and the
    cross-attention caches, and its self-attention caches (growing ones, whose reorder copies the
    rows it keeps, so the copies of the cache objects share nothing that changes)."""
    assert source.cache is not None
    out = []
    for i, length in enumerate(lengths):
        index = torch.tensor([i], device=source.memory.device)
        cache = [LayerCache(copy.copy(c.self_attn), copy.copy(c.cross_attn)) for c in source.cache]
        row = EncodedSource(source.memory, source.mask, cache)
        row.reorder(index, index)
        row.memory, row.mask = row.memory[:, :length], row.mask[..., :length]
        for layer in cache:
            assert isinstance(layer.cross_attn, KVCache)
            layer.cross_attn.truncate(length)
        out.append(row)
    return out
