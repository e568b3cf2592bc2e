"""Decoding: one loop over a next-token function, shared by every model that generates.

A model plugs in through a :data:`NextLogits` function: given the tokens so far
``(batch, t)`` it returns the logits of the next token ``(batch, vocab)``. With
a KV cache the function only looks at the newest token; without one it
recomputes the whole prefix. The search itself does not know which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.models.transformer import EncodedSource, Transformer

NextLogits = Callable[[Tensor], Tensor]


@dataclass
class Generated:
    """``tokens`` (batch, steps) after the prefix, padded after EOS; ``logits`` (batch, steps, vocab)
    of each step when asked for."""

    tokens: Tensor
    logits: Tensor | None = None


@torch.no_grad()
def greedy_search(
    next_logits: NextLogits,
    prefix: Tensor,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    keep_logits: bool = False,
) -> Generated:
    """Pick argmax_y P(y | prefix) step by step until every row has produced EOS
    or ``max_new_tokens`` tokens. Rows that finished keep receiving ``pad_id``."""
    tokens = prefix
    finished = torch.zeros(prefix.shape[0], dtype=torch.bool, device=prefix.device)
    steps: list[Tensor] = []
    all_logits: list[Tensor] = []
    for _ in range(max_new_tokens):
        logits = next_logits(tokens).float()
        if keep_logits:
            all_logits.append(logits)
        choice = logits.argmax(dim=-1).masked_fill(finished, pad_id)
        steps.append(choice)
        tokens = torch.cat([tokens, choice[:, None]], dim=1)
        finished |= choice == eos_id
        if bool(finished.all()):
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
    return greedy_search(
        seq2seq_next_logits(model, src, use_cache),
        prefix,
        max_new_tokens,
        eos_id,
        model.config.pad_id,
        keep_logits,
    )
