"""Decoding a decoder-only model over left-padded prompts, past the end of its context."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.sampling import NextLogits
from vaswani.models.gpt import GPT

DEFAULT_NEW_TOKENS = 100


def lm_budget(decoding: DecodingConfig) -> int:
    """The tokens a language model generates under ``decoding``: its ``max_new_tokens``, else
    100. Refuses what a decoder-only model does not do here: beam search, a budget relative to
    a source."""
    if decoding.strategy == "beam":
        raise ConfigError("decoding.beam: a language model generates greedily or by sampling")
    if decoding.max_len_a is not None or decoding.max_len_b is not None:
        raise ConfigError(
            "decoding.max_len_a and decoding.max_len_b apply to translation (a budget relative to "
            "the source): give decoding.max_new_tokens"
        )
    return DEFAULT_NEW_TOKENS if decoding.max_new_tokens is None else decoding.max_new_tokens


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
    device = prompt_mask.device
    columns = torch.arange(prompt_len, device=device)
    # Each row's first column in view, and whether any row is padded, read from the device once:
    # kept on the host, so that the steps decide when a context is full without reading it.
    starts: list[int] = torch.where(prompt_mask, columns, prompt_len).amin(dim=1).tolist()
    view_from = torch.tensor(starts, dtype=torch.long, device=device)
    padded = not bool(prompt_mask.all())
    cache = model.new_cache() if use_cache else None
    state = {"first": 0, "fed": 0}  # first column fed to the model, columns in the cache

    def next_logits(tokens: Tensor) -> Tensor:
        nonlocal cache, view_from
        length = tokens.shape[1]
        if any(length - start > max_len for start in starts):
            starts[:] = [length - max_len // 2 if length - start > max_len else start for start in starts]
            view_from = torch.tensor(starts, dtype=torch.long, device=device)
            state["first"] = min(starts)
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


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the first stop string, and whether one was found."""
    found = [text.index(s) for s in stop if s and s in text]
    return (text[: min(found)], True) if found else (text, False)


def held_back(text: str, stop: Sequence[str]) -> int:
    """How many trailing characters to keep from a stream for now: an incomplete UTF-8
    character (decoded as U+FFFD) or the beginning of a stop string."""
    hold = 1 if text.endswith("\ufffd") else 0
    for s in stop:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                hold = max(hold, n)
                break
    return hold
