"""Greedy search and sampling: one token at a time over a next-token function.

A model plugs in through a :data:`NextLogits` function: given the tokens so far ``(batch, t)``
it returns the logits of the next token ``(batch, vocab)``. With a KV cache the function only
looks at the newest token; without one it recomputes the whole prefix. The search itself does
not know which.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.errors import ConfigError
from vaswani.generation.config import GREEDY, DecodingConfig

NextLogits = Callable[[Tensor], Tensor]


@dataclass
class Generated:
    """``tokens`` (batch, steps) after the prefix, padded after EOS; ``logits`` (batch, steps, vocab)
    of each step when asked for."""

    tokens: Tensor
    logits: Tensor | None = None


def choose_next(logits: Tensor, decoding: DecodingConfig, generator: torch.Generator | None = None) -> Tensor:
    """The next token of each row of ``logits`` (batch, vocab): argmax, or with the ``sample``
    strategy a draw from :func:`sampling_probs`. A temperature of 0 is argmax."""
    temperature = 1.0 if decoding.temperature is None else decoding.temperature
    if decoding.strategy != "sample" or temperature == 0:
        return logits.argmax(dim=-1)
    probs = sampling_probs(logits, decoding)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def sampling_probs(logits: Tensor, decoding: DecodingConfig) -> Tensor:
    """softmax(logits / temperature) of each row of ``logits`` (batch, vocab), restricted to the
    ``top_k`` most likely tokens and to the smallest set whose probability reaches ``top_p``
    (nucleus sampling, Holtzman et al. 2020), as float64: finite for every finite temperature > 0.

    The largest logit of each row is subtracted before the division, in float64 (a temperature of
    1e-300 or 1e308 is no float32): a temperature so small that (l - max) / T overflows gives the
    tokens below the maximum -inf, i.e. argmax (ties share the draw); one so large that it
    underflows gives the uniform draw over the tokens not masked (-inf stays -inf)."""
    temperature = 1.0 if decoding.temperature is None else decoding.temperature
    if decoding.top_k is not None and decoding.top_k < logits.shape[-1]:
        kth = logits.topk(decoding.top_k, dim=-1).values[:, -1:]  # the temperature keeps the order
        logits = logits.masked_fill(logits < kth, -math.inf)
    wide = logits.double()
    scaled = (wide - wide.amax(dim=-1, keepdim=True)) / temperature
    if decoding.top_p is not None and decoding.top_p < 1:
        sorted_logits, order = scaled.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above
        # A set whose probability equals top_p up to rounding (0.5 + 0.3 summed as 0.7999…) reaches it.
        reached = before >= decoding.top_p - 1e-6
        reached[..., 0] = False  # the most likely token always stays, however small top_p
        drop = reached.scatter(-1, order, reached)
        scaled = scaled.masked_fill(drop, -math.inf)
    return scaled.softmax(dim=-1)


@torch.no_grad()
def generate(
    next_logits: NextLogits,
    prefix: Tensor,
    max_new_tokens: int | Tensor,
    eos_id: int,
    pad_id: int,
    decoding: DecodingConfig = GREEDY,
    generator: torch.Generator | None = None,
    keep_logits: bool = False,
    on_step: Callable[[Tensor], bool] | None = None,
    suppress: Sequence[int] = (),
) -> Generated:
    """Extend ``prefix`` (batch, t) one token at a time until every row has produced EOS or
    ``max_new_tokens`` tokens (one number, or one per row (batch,), resolved by the driver from
    ``decoding``): argmax_y P(y | prefix) with the ``greedy`` strategy, else a draw (see
    :func:`choose_next`) from ``generator``. Rows that finished receive ``pad_id``.
    ``on_step(tokens)`` sees each step's tokens (batch,) as they are chosen (streaming) and
    may return True to stop. The ids in ``suppress`` are never chosen: their logits are set to
    -inf (also in the kept ``logits``), as Hugging Face's ``bad_words_ids`` do."""
    if decoding.strategy == "beam":
        raise ConfigError("decoding.beam: beam search is vaswani.generation.beam.beam_search, not generate")
    tokens = prefix
    finished = torch.zeros(prefix.shape[0], dtype=torch.bool, device=prefix.device)
    limits, n_steps = per_row_limits(max_new_tokens, prefix.shape[0], prefix.device)
    suppressed = torch.tensor(list(suppress), dtype=torch.long, device=prefix.device)
    steps: list[Tensor] = []
    all_logits: list[Tensor] = []
    for step in range(n_steps):
        logits = next_logits(tokens).float()
        if suppress:
            logits.index_fill_(-1, suppressed, -math.inf)
        if keep_logits:
            all_logits.append(logits)
        choice = choose_next(logits, decoding, generator).masked_fill(finished, pad_id)
        steps.append(choice)
        tokens = torch.cat([tokens, choice[:, None]], dim=1)
        finished |= choice == eos_id
        finished |= limits <= step + 1
        stop = on_step(choice) if on_step is not None else False
        # The one read of the device a step: whether every row has ended decides whether to stop.
        if stop or bool(finished.all()):
            break
    new = torch.stack(steps, dim=1) if steps else prefix.new_zeros(prefix.shape[0], 0)
    return Generated(new, torch.stack(all_logits, dim=1) if keep_logits and all_logits else None)


def per_row_limits(max_new_tokens: int | Tensor, batch: int, device: torch.device) -> tuple[Tensor, int]:
    """``max_new_tokens`` (one number or (batch,)) as a (batch,) tensor, and the steps needed
    (read once, before the first step, from a per-row budget)."""
    limits = torch.as_tensor(max_new_tokens, device=device).expand(batch)
    if isinstance(max_new_tokens, int):
        return limits, max_new_tokens
    return limits, int(limits.max()) if batch else 0
