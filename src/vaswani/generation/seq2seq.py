"""Decoding an encoder-decoder: the source is encoded once, the decoder extends the target from
BOS greedily, by sampling or by beam search, as the :class:`DecodingConfig` says."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from vaswani.errors import ConfigError
from vaswani.generation.beam import Beams, Reorderable, beam_search
from vaswani.generation.compiled import CompiledDecoding, seq2seq_compiled_beams, seq2seq_compiled_next_logits
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.sampling import Generated, NextLogits, generate
from vaswani.models.transformer import EncodedSource, Transformer


def seq2seq_decoding(model: Transformer, src: Tensor, use_cache: bool = True) -> Reorderable:
    """The next-token function of an encoder-decoder (see :func:`seq2seq_next_logits`) with
    the reordering of its encoder output and cache."""
    source: EncodedSource = model.start_decoding(src) if use_cache else model.encode(src)

    def next_logits(tokens: Tensor) -> Tensor:
        step_input = tokens[:, -1:] if use_cache else tokens
        logits, _ = model.decode(step_input, source, last_only=True)
        return logits[:, -1]

    return Reorderable(next_logits, source.reorder)


def seq2seq_next_logits(model: Transformer, src: Tensor, use_cache: bool = True) -> NextLogits:
    """The next-token function of an encoder-decoder: the source is encoded once;
    with ``use_cache`` the decoder sees only the newest token and appends its
    keys and values to the cache, else it recomputes the whole prefix."""
    return seq2seq_decoding(model, src, use_cache).next_logits


def _start(model: Transformer, src: Tensor, bos_id: int, decoding: DecodingConfig) -> tuple[Tensor, Tensor]:
    """The BOS prefix (batch, 1) and each row's budget (batch,) from ``decoding`` and the
    source lengths (the tokens of ``src`` (batch, src_len) that are not the model's pad_id)."""
    if decoding.stop:
        raise ConfigError("decoding.stop applies to language models: a translation ends at EOS")
    if model.training:  # eval() visits every module: 0.7 ms a call for a 2 + 2 translator
        model.eval()
    prefix = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    lengths = (src != model.config.pad_id).sum(dim=1)
    return prefix, decoding.target_budget(lengths, model.config.max_len)


@torch.no_grad()
def translate_ids(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    decoding: DecodingConfig = GREEDY,
    generator: torch.Generator | None = None,
    keep_logits: bool = False,
    suppress: Sequence[int] = (),
    on_step: Callable[[Tensor], bool] | None = None,
    compiled: CompiledDecoding | None = None,
) -> Generated:
    """Greedy or sampled translations (:func:`~vaswani.generation.sampling.generate`) of a padded
    batch of source ids ``src`` (batch, src_len), starting from BOS, within the budget of
    :meth:`DecodingConfig.target_budget`. Samples are drawn from ``generator`` (default: one on
    ``src``'s device seeded with ``decoding.seed``); every tensor stays on ``src``'s device; the
    ids in ``suppress`` are never generated. ``on_step(tokens)`` sees each step's tokens (batch,)
    and may return True to stop (streaming, cancellation), as in ``generate``. With ``compiled``
    (and the cache) the decoder's steps run on a static cache through ``torch.compile``
    (:func:`~vaswani.generation.compiled.seq2seq_compiled_next_logits`): the same ids."""
    prefix, budget = _start(model, src, bos_id, decoding)
    if compiled is not None and decoding.use_cache and src.shape[0]:
        most = int(budget.max())  # read once, before decoding: the static cache's columns
        next_logits = seq2seq_compiled_next_logits(model, src, most, compiled)
    else:
        next_logits = seq2seq_next_logits(model, src, decoding.use_cache)
    return generate(
        next_logits,
        prefix,
        budget,
        eos_id,
        model.config.pad_id,
        decoding,
        generator or decoding.generator(src.device),
        keep_logits=keep_logits,
        on_step=on_step,
        suppress=suppress,
    )


@torch.no_grad()
def translate_beam_ids(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    decoding: DecodingConfig,
    suppress: Sequence[int] = (),
    on_step: Callable[[Tensor], bool] | None = None,
    compiled: CompiledDecoding | None = None,
) -> Beams:
    """Beam search translation (:func:`~vaswani.generation.beam.beam_search`) of a padded batch
    of source ids, from BOS, within the budget of :meth:`DecodingConfig.target_budget`; the ids
    in ``suppress`` are never generated. ``on_step(tokens)`` is consulted once a step and may
    stop the search (cancellation), as in ``beam_search``. With ``compiled`` (and the cache) the
    decoder's steps run on static caches through ``torch.compile``
    (:func:`~vaswani.generation.compiled.seq2seq_compiled_beams`)."""
    prefix, budget = _start(model, src, bos_id, decoding)
    if compiled is not None and decoding.use_cache and src.shape[0]:
        state = seq2seq_compiled_beams(model, src, int(budget.max()), compiled)
    else:
        state = seq2seq_decoding(model, src, decoding.use_cache)
    return beam_search(state, prefix, budget, eos_id, model.config.pad_id, decoding, suppress, on_step)
