"""Speculative decoding of a decoder-only model's greedy output with a smaller draft model
(Leviathan et al. 2023; Hugging Face's "assisted generation").

Each round the draft proposes k tokens greedily, one at a time on its own KV cache; the target
scores all of them in one forward pass on its KV cache, and the longest prefix on which the
draft's token is the target's argmax is accepted, followed by the target's own token at the first
disagreement (or after the last proposal). Both caches are then cut back to the accepted tokens.
Every token is the target's argmax given the tokens before it, so the output is the target's
greedy output (the logits of k + 1 positions computed in one pass instead of one at a time equal
them up to floating-point rounding, which could only matter at an exact tie).

The target sees the same view of the tokens as :func:`~vaswani.generation.lm.lm_next_logits`
gives plain greedy decoding: when more than its ``max_len`` tokens would be in view, the oldest
half is dropped and the rest re-read; a round never spans such a cut (k is shortened to reach it).
One prompt at a time (batch 1), full attention only: a rolling cache (``attn_window``) has
forgotten the keys a rejection would need again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.models.gpt import GPT

DRAFT_TOKENS = 4
"""The first k of the adaptive schedule (Hugging Face's heuristic: k + 2 after a round in which
every proposal was accepted, k − 1 (at least 1) after one with a rejection)."""

MAX_DRAFT_TOKENS = 32
"""The largest k the adaptive schedule reaches."""


@dataclass
class Speculation:
    """``tokens`` (1, n): the new tokens, through EOS or to the budget; ``proposed`` and
    ``accepted`` draft tokens; ``rounds``: forward passes of the target."""

    tokens: Tensor
    proposed: int = 0
    accepted: int = 0
    rounds: int = 0

    @property
    def acceptance(self) -> float:
        """The fraction of proposed draft tokens the target accepted (0 when none was proposed)."""
        return self.accepted / self.proposed if self.proposed else 0.0


class CachedView:
    """A decoder-only model over a window of the tokens with its KV cache: the tokens from
    ``start`` on, positions counted from there, of which the first ``fed`` are in the cache."""

    def __init__(self, model: GPT, vocab_size: int | None) -> None:
        self.model, self.vocab_size, self.max_len = model, vocab_size, model.config.max_len
        self.start = 0
        self.cache = model.new_cache()

    @property
    def fed(self) -> int:
        """How many tokens of the sequence (from its beginning) the cache has seen."""
        return self.start + self.cache[0].self_attn.length

    def restart(self, start: int) -> None:
        """View the tokens from ``start`` on, with an empty cache."""
        self.start, self.cache = start, self.model.new_cache()

    def follow(self, length: int) -> None:
        """Before predicting token ``length``: drop the oldest half of the view when more than
        ``max_len`` tokens would be in it (the rule of plain decoding)."""
        if length - self.start > self.max_len:
            self.restart(length - self.max_len // 2)

    def logits(self, tokens: Tensor, last_only: bool) -> Tensor:
        """Feed the tokens (1, length) not yet in the cache; their next-token logits
        (1, new | 1, vocab), those of ids >= ``vocab_size`` at -inf."""
        logits = self.model(tokens[:, self.fed :], cache=self.cache, last_only=last_only)
        if self.vocab_size is not None and self.vocab_size < logits.shape[-1]:
            logits[..., self.vocab_size :] = -math.inf
        return logits

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` tokens of the sequence in the cache (at most those it has)."""
        kept = min(length, self.fed) - self.start
        for layer in self.cache:
            layer.self_attn.truncate(kept)

    def propose(self, tokens: Tensor, n: int) -> Tensor:
        """``n`` greedy tokens (1, n) after ``tokens`` (1, length), ``n`` <= ``max_len`` / 2."""
        length = tokens.shape[1]
        if length + n - 1 - self.start > self.max_len:
            self.restart(length - self.max_len // 2)
        for _ in range(n):
            choice = self.logits(tokens, last_only=True)[:, -1].argmax(dim=-1, keepdim=True)
            tokens = torch.cat([tokens, choice], dim=1)
        return tokens[:, length:]


def is_greedy(decoding: DecodingConfig) -> bool:
    """Whether ``decoding`` chooses the argmax at every step: greedy, or sampling at temperature 0."""
    return decoding.strategy == "greedy" or (decoding.strategy == "sample" and decoding.temperature == 0)


def check_speculative(target: GPT, draft: GPT) -> None:
    """Refuse, in one line, models speculative decoding does not decode: windowed attention."""
    for name, model in (("the target", target), ("the draft", draft)):
        if model.config.attn_window is not None:
            raise ConfigError(
                f"--draft: {name} has windowed attention (model.attn_window), whose rolling cache "
                "cannot take back rejected tokens; speculative decoding needs full attention"
            )


@torch.no_grad()
def speculative_greedy(
    target: GPT,
    draft: GPT,
    prompt: Tensor,
    max_new_tokens: int,
    eos_id: int,
    vocab_size: int | None = None,
    draft_tokens: int | None = None,
    on_step: Callable[[Tensor], bool] | None = None,
) -> Speculation:
    """The target's greedy continuation of ``prompt`` (1, t), at most ``max_new_tokens`` tokens,
    ending after ``eos_id``, with ``draft`` proposing ``draft_tokens`` tokens a round (None:
    adaptive, from :data:`DRAFT_TOKENS`). ``on_step`` sees each new token (1,) in order and may
    return True to stop; ``vocab_size`` as in :func:`~vaswani.generation.lm.lm_next_logits`."""
    if prompt.shape[0] != 1:
        raise ConfigError(f"--draft decodes one prompt at a time (batch 1), got {prompt.shape[0]} rows")
    if draft_tokens is not None and draft_tokens < 1:
        raise ConfigError(f"--draft-tokens must be >= 1, got {draft_tokens}")
    check_speculative(target, draft)
    target.eval()
    draft.eval()
    judge, guesser = CachedView(target, vocab_size), CachedView(draft, vocab_size)
    k = DRAFT_TOKENS if draft_tokens is None else draft_tokens
    tokens, result, done = prompt, Speculation(prompt[:, :0]), False
    while not done and tokens.shape[1] - prompt.shape[1] < max_new_tokens:
        length = tokens.shape[1]
        judge.follow(length)
        left = max_new_tokens - (length - prompt.shape[1])
        n = min(k, left - 1, judge.max_len - (length - judge.start), guesser.max_len // 2)
        proposal = guesser.propose(tokens, n)
        choice = judge.logits(torch.cat([tokens, proposal], dim=1), last_only=False)[:, -(n + 1) :]
        choice = choice.argmax(dim=-1)
        # The one read of the device a round: how many proposals the target agrees with.
        agreed = int((choice[:, :n] == proposal).cumprod(dim=-1).sum()) if n else 0
        new = choice[:, : agreed + 1]
        judge.truncate(length + agreed)
        guesser.truncate(length + agreed)
        result.proposed, result.accepted, result.rounds = (
            result.proposed + n, result.accepted + agreed, result.rounds + 1,
        )  # fmt: skip
        kept: list[int] = []
        for token in new[0].tolist():
            kept.append(token)
            stop = on_step(new.new_tensor([token])) if on_step is not None else False
            if token == eos_id or stop:
                done = True
                break
        new = new[:, : len(kept)]
        tokens = torch.cat([tokens, new], dim=1)
        result.tokens = torch.cat([result.tokens, new], dim=1)
        if draft_tokens is None:
            k = min(k + 2, MAX_DRAFT_TOKENS) if agreed == n == k else max(1, k - 1)
    return result
