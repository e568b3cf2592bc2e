"""Decoding: one loop over a next-token function, shared by every model that generates.

A model plugs in through a :data:`NextLogits` function: given the tokens so far
``(batch, t)`` it returns the logits of the next token ``(batch, vocab)``. With
a KV cache the function only looks at the newest token; without one it
recomputes the whole prefix. The search itself does not know which.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.models.gpt import GPT
from vaswani.models.transformer import EncodedSource, Transformer

NextLogits = Callable[[Tensor], Tensor]


@dataclass
class Generated:
    """``tokens`` (batch, steps) after the prefix, padded after EOS; ``logits`` (batch, steps, vocab)
    of each step when asked for."""

    tokens: Tensor
    logits: Tensor | None = None


@dataclass(frozen=True)
class Sampling:
    """How the next token is drawn: softmax(logits / temperature), restricted to the ``top_k``
    most likely tokens and to the smallest set whose probability reaches ``top_p`` (nucleus
    sampling, Holtzman et al. 2020). A temperature of 0 is greedy (argmax)."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def choose_next(
    logits: Tensor, sampling: Sampling | None, generator: torch.Generator | None = None
) -> Tensor:
    """The next token of each row of ``logits`` (batch, vocab): argmax, or a draw per ``sampling``."""
    if sampling is None or sampling.temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / sampling.temperature
    if sampling.top_k is not None and sampling.top_k < logits.shape[-1]:
        kth = logits.topk(sampling.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, -math.inf)
    if sampling.top_p is not None and sampling.top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above
        drop = (before >= sampling.top_p).scatter(-1, order, before >= sampling.top_p)
        logits = logits.masked_fill(drop, -math.inf)
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    next_logits: NextLogits,
    prefix: Tensor,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    sampling: Sampling | None = None,
    generator: torch.Generator | None = None,
    keep_logits: bool = False,
    on_step: Callable[[Tensor], bool] | None = None,
) -> Generated:
    """Extend ``prefix`` (batch, t) one token at a time until every row has produced EOS or
    ``max_new_tokens`` tokens: argmax_y P(y | prefix) without ``sampling`` (greedy), else a
    draw. Rows that finished receive ``pad_id``. ``on_step(tokens)`` sees each step's
    tokens (batch,) as they are chosen (streaming) and may return True to stop."""
    tokens = prefix
    finished = torch.zeros(prefix.shape[0], dtype=torch.bool, device=prefix.device)
    steps: list[Tensor] = []
    all_logits: list[Tensor] = []
    for _ in range(max_new_tokens):
        logits = next_logits(tokens).float()
        if keep_logits:
            all_logits.append(logits)
        choice = choose_next(logits, sampling, generator).masked_fill(finished, pad_id)
        steps.append(choice)
        tokens = torch.cat([tokens, choice[:, None]], dim=1)
        finished |= choice == eos_id
        stop = on_step(choice) if on_step is not None else False
        if stop or bool(finished.all()):
            break
    new = torch.stack(steps, dim=1) if steps else prefix.new_zeros(prefix.shape[0], 0)
    return Generated(new, torch.stack(all_logits, dim=1) if keep_logits and all_logits else None)


def seq2seq_next_logits(model: Transformer, src: Tensor, use_cache: bool = True) -> NextLogits:
    """The next-token function of an encoder-decoder: the source is encoded once;
    with ``use_cache`` the decoder sees only the newest token and appends its
    keys and values to the cache, else it recomputes the whole prefix."""
    source: EncodedSource = model.start_decoding(src) if use_cache else model.encode(src)

    def next_logits(tokens: Tensor) -> Tensor:
        step_input = tokens[:, -1:] if use_cache else tokens
        logits, _ = model.decode(step_input, source, last_only=True)
        return logits[:, -1]

    return next_logits


def translate_ids(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int,
    use_cache: bool = True,
    keep_logits: bool = False,
) -> Generated:
    """Greedy translation of a padded batch of source ids, starting from BOS."""
    model.eval()
    prefix = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    return generate(
        seq2seq_next_logits(model, src, use_cache),
        prefix,
        max_new_tokens,
        eos_id,
        model.config.pad_id,
        keep_logits=keep_logits,
    )


def lm_next_logits(
    model: GPT, prompt_mask: Tensor, use_cache: bool = True, vocab_size: int | None = None
) -> NextLogits:
    """The next-token function of a decoder-only model over left-padded prompts.

    ``prompt_mask`` (batch, prompt_len) is True on real tokens; positions come from it, so a
    padded row continues exactly as it would alone. With ``use_cache`` only the newest token
    is fed and its keys and values appended. When a row's context (``max_len`` tokens) is
    full, its oldest half is dropped from view and the rest re-read: generation goes on past
    the context with the most recent ``max_len / 2`` tokens or more in view (the same with or
    without the cache, alone or in a batch). Logits of ids >= ``vocab_size`` (padding of the
    embedding) are never chosen.
    """
    max_len = model.config.max_len
    batch, prompt_len = prompt_mask.shape
    columns = torch.arange(prompt_len, device=prompt_mask.device)
    view_from = torch.where(prompt_mask, columns, prompt_len).amin(dim=1)  # first column in view
    padded = not bool(prompt_mask.all())
    cache = model.new_cache() if use_cache else None
    state = {"first": 0, "fed": 0}  # first column fed to the model, columns in the cache

    def next_logits(tokens: Tensor) -> Tensor:
        nonlocal cache, view_from
        length = tokens.shape[1]
        full = length - view_from > max_len
        if bool(full.any()):
            view_from = torch.where(full, length - max_len // 2, view_from)
            state["first"] = int(view_from.min())
            state["fed"] = state["first"]
            cache = model.new_cache() if use_cache else None
        first = state["first"]
        mask = None
        if padded or first:  # else every token is in view: positions follow the cache
            new = prompt_mask.new_ones(batch, length - prompt_len)
            columns = torch.arange(length, device=tokens.device)
            mask = (torch.cat([prompt_mask, new], dim=1) & (columns >= view_from[:, None]))[:, first:]
        start = state["fed"] if cache is not None else first
        logits = model(tokens[:, start:], attention_mask=mask, cache=cache, last_only=True)[:, -1]
        state["fed"] = length
        if vocab_size is not None and vocab_size < logits.shape[-1]:
            logits[:, vocab_size:] = -math.inf
        return logits

    return next_logits
