"""Beam search over a next-token function whose model keeps state per batch row.

Beam search needs to move the model's per-row state (encoder output, cache) along with the
hypotheses it keeps: :class:`Reorderable` pairs the next-token function with that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.generation.sampling import NextLogits, per_row_limits


@dataclass(frozen=True)
class Reorderable:
    """A next-token function whose model keeps state per batch row (encoder output, KV cache).

    ``reorder(index, sources)`` keeps the decoder rows ``index`` (rows',) of that state, in
    that order (repeats allowed), so that the state follows the hypotheses a search keeps, and
    the source rows ``sources`` (all of them if ``None``), each of which serves the same number
    of consecutive decoder rows.
    """

    next_logits: NextLogits
    reorder: Callable[[Tensor, Tensor | None], None]


@dataclass
class Beams:
    """The ``n_best`` hypotheses of each row, best first: ``tokens`` (batch, n_best, steps) after
    the prefix, padded after EOS; ``scores`` (batch, n_best) log P(y | x) / lp(|y|);
    ``lengths`` (batch, n_best) = |y|, EOS included."""

    tokens: Tensor
    scores: Tensor
    lengths: Tensor


def _take(x: Tensor, index: Tensor) -> Tensor:
    """x[r, index[r, j], ...] for every row r: gather along dim 1 of (rows, n, ...)."""
    return x.gather(1, index.view(*index.shape, *[1] * (x.dim() - 2)).expand(*index.shape, *x.shape[2:]))


@torch.no_grad()
def beam_search(
    state: Reorderable,
    prefix: Tensor,
    max_new_tokens: int | Tensor,
    eos_id: int,
    pad_id: int,
    decoding: DecodingConfig,
    suppress: Sequence[int] = (),
    on_step: Callable[[Tensor], bool] | None = None,
) -> Beams:
    """Beam search: approximately argmax_y log P(y | prefix) / lp(|y|), ``decoding.beam``
    hypotheses per row, lp = ``decoding.penalty``.

    ``state`` holds state for the ``batch`` rows of ``prefix`` (batch, t). The first step
    is one call of ``state.next_logits`` on those rows (the ``beam`` hypotheses are all the
    prefix then); every later step is one call on (rows still searching)·beam rows, each row's
    ``beam`` hypotheses adjacent. A row is searched until it is done, then dropped from the
    model's batch.

    The convention is Hugging Face's ``generate(num_beams=beam, length_penalty=alpha,
    early_stopping=...)`` with a ``simple`` penalty (transformers 5.x
    ``GenerationMixin._beam_search``):

    - Scores are sums of log_softmax of the float32 logits. At the first step only one
      of the identical hypotheses is expanded. The ids in ``suppress`` get a log-probability
      of -inf after the log_softmax (HF's ``bad_words_ids``, which process log-probabilities).
    - Each step ranks all beam·vocab continuations of a row and keeps the best 2·beam
      candidates. The best ``beam`` of them that do not end become the running hypotheses.
    - A candidate ending in EOS joins the row's finished hypotheses (the best ``beam`` are
      kept) only if it ranks among the first ``beam`` of the 2·beam, with score
      sum / lp(|y|), |y| = generated tokens including EOS (not the start token).
    - At the row's ``max_new_tokens`` (one number, or one per row (batch,), resolved by the
      driver from ``decoding``) every candidate ends: the first ``beam`` of them join the
      finished hypotheses as they are.
    - A row is done (``decoding.early_stopping``, HF's rules): ``True``, as soon as it has
      ``beam`` finished hypotheses; ``False``, when it has them and the best running sum over
      lp(current length) does not beat the worst finished score (HF's heuristic); ``"never"``,
      when it has them and the best running sum over the largest lp of the lengths it could
      still reach does not (log-probabilities are <= 0, so no running hypothesis can still win;
      HF bounds with the maximum length for alpha > 0, the current one otherwise, which stops
      no earlier and returns the same).

    ``on_step(tokens)`` is consulted once a step, after it, with the newest token of each running
    hypothesis of the rows still searching (rows, beam); it may return True (or raise) to stop the
    search there, as a server does for a client that has gone: each row then has the finished
    hypotheses found so far (a slot none reached scores -inf, length 0).

    ``beam=1`` is greedy search. Returns the ``n_best`` (<= ``beam``) best finished
    hypotheses of each row, best first (a slot no hypothesis of nonzero probability reached,
    possible only when fewer than 2·beam tokens can follow, has score -inf and length 0).
    """
    if decoding.strategy == "sample":
        raise ConfigError("beam search and sampling do not go together: decoding.strategy is 'sample'")
    beam, n_best, length_penalty, early_stopping = (
        decoding.beam, decoding.n_best, decoding.penalty, decoding.stopping,
    )  # fmt: skip
    batch, start = prefix.shape
    device = prefix.device
    limits, n_steps = per_row_limits(max_new_tokens, batch, device)
    if batch and int(limits.min()) < 1:  # read once, before the search
        raise ValueError("max_new_tokens must be >= 1 for every row")
    width = 2 * beam
    # The finished hypotheses of every row: tokens after the prefix, scores, lengths, filled.
    done_tokens = torch.full((batch, beam, n_steps), pad_id, dtype=torch.long, device=device)
    done_scores = torch.full((batch, beam), -math.inf, device=device)
    done_lengths = torch.zeros((batch, beam), dtype=torch.long, device=device)
    done_filled = torch.zeros((batch, beam), dtype=torch.bool, device=device)
    # The rows still searching (``alive``) and their running hypotheses: one until the first step.
    alive = torch.arange(batch, device=device)
    seqs = torch.full((batch, 1, start + n_steps), pad_id, dtype=torch.long, device=device)
    seqs[:, :, :start] = prefix[:, None]
    running = torch.zeros((batch, 1), device=device)
    suppressed = torch.tensor(list(suppress), dtype=torch.long, device=device)
    for step in range(n_steps):
        if not alive.numel():
            break
        (rows, hyps), t = running.shape, start + step
        logits = state.next_logits(seqs[:, :, :t].reshape(rows * hyps, t)).float()
        vocab = logits.shape[-1]
        log_probs = logits.log_softmax(dim=-1)
        if suppress:
            log_probs.index_fill_(-1, suppressed, -math.inf)
        totals = (log_probs.view(rows, hyps, vocab) + running[:, :, None]).view(rows, hyps * vocab)
        if hyps * vocab < width:  # a tiny vocabulary: impossible candidates fill the 2·beam
            totals = F.pad(totals, (0, width - hyps * vocab), value=-math.inf)
        cand_scores, flat = totals.topk(width, dim=1)
        origin, token = (flat // vocab).clamp(max=hyps - 1), flat % vocab
        cand_seqs = _take(seqs, origin)
        cand_seqs[:, :, t] = token
        at_limit = limits[alive] <= step + 1
        ends = (token == eos_id) | at_limit[:, None]
        # The running hypotheses: the best ``beam`` candidates that did not end.
        keep = cand_scores.masked_fill(ends, -math.inf).topk(beam, dim=1).indices
        running = _take(cand_scores.masked_fill(ends, -math.inf), keep)
        seqs = _take(cand_seqs, keep)
        parent = _take(origin, keep)
        # The finished hypotheses: ended candidates among the first ``beam`` compete for the slots
        # (impossible ones, of probability 0, never: they fill the 2·beam when the vocabulary is tiny).
        # Merged at every step, on the device (asking whether any candidate joins would wait for
        # it): a candidate that does not join comes in as an empty slot (score -inf, length 0,
        # pad tokens), which no filled slot loses to and which equals every other empty slot.
        joins = ends & (torch.arange(width, device=device) < beam) & (cand_scores > -math.inf)
        lp = length_penalty(torch.tensor(step + 1, device=device))
        scores = torch.where(joins, cand_scores / lp, -math.inf)
        merged_scores = torch.cat([done_scores[alive], scores], dim=1)
        best = merged_scores.topk(beam, dim=1).indices
        done_scores[alive] = _take(merged_scores, best)
        done_filled[alive] = _take(torch.cat([done_filled[alive], joins], dim=1), best)
        new_lengths = torch.where(joins, step + 1, 0)
        done_lengths[alive] = _take(torch.cat([done_lengths[alive], new_lengths], dim=1), best)
        new_tokens = cand_seqs[:, :, start:].masked_fill(~joins[:, :, None], pad_id)
        done_tokens[alive] = _take(torch.cat([done_tokens[alive], new_tokens], dim=1), best)
        finished = done_filled[alive].all(dim=1)
        if early_stopping is not True:
            if early_stopping == "never":  # lp is monotonic: its largest is at one end of the lengths left
                lp_next = length_penalty(torch.tensor(step + 2, device=device))
                lp_best = torch.maximum(lp_next, length_penalty(limits[alive]))
            else:  # the running hypotheses have step + 1 tokens
                lp_best = length_penalty(torch.tensor(step + 1, device=device))
            finished &= running[:, 0] / lp_best <= done_scores[alive].amin(dim=1)
        finished |= at_limit
        # The step's read of the device: the rows still searching (their number shapes the next step).
        searching = (~finished).nonzero().squeeze(1)
        alive, running, seqs = alive[searching], running[searching], seqs[searching]
        sources = searching if searching.numel() < rows else None
        state.reorder((searching[:, None] * hyps + parent[searching]).flatten(), sources)
        if on_step is not None and on_step(seqs[:, :, t]):
            break
    length = int(done_lengths[:, :n_best].max()) if batch else 0  # read once, after the search
    return Beams(done_tokens[:, :n_best, :length], done_scores[:, :n_best], done_lengths[:, :n_best])
