"""Decoding: greedy, sampling and beam search over a next-token function, shared by every
model that generates.

A model plugs in through a :data:`NextLogits` function: given the tokens so far
``(batch, t)`` it returns the logits of the next token ``(batch, vocab)``. With
a KV cache the function only looks at the newest token; without one it
recomputes the whole prefix. The search itself does not know which. Beam search
also needs to move the model's per-row state (encoder output, cache) along with
the hypotheses it keeps: :class:`Reorderable` pairs the function with that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
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
        # A set whose probability equals top_p up to rounding (0.5 + 0.3 summed as 0.7999…) reaches it.
        reached = before >= sampling.top_p - 1e-6
        reached[..., 0] = False  # the most likely token always stays, however small top_p
        drop = reached.scatter(-1, order, reached)
        logits = logits.masked_fill(drop, -math.inf)
    probs = logits.softmax(dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate(
    next_logits: NextLogits,
    prefix: Tensor,
    max_new_tokens: int | Tensor,
    eos_id: int,
    pad_id: int,
    sampling: Sampling | None = None,
    generator: torch.Generator | None = None,
    keep_logits: bool = False,
    on_step: Callable[[Tensor], bool] | None = None,
    suppress: Sequence[int] = (),
) -> Generated:
    """Extend ``prefix`` (batch, t) one token at a time until every row has produced EOS or
    ``max_new_tokens`` tokens (one number, or one per row (batch,)): argmax_y P(y | prefix)
    without ``sampling`` (greedy), else a draw. Rows that finished receive ``pad_id``.
    ``on_step(tokens)`` sees each step's tokens (batch,) as they are chosen (streaming) and
    may return True to stop. The ids in ``suppress`` are never chosen: their logits are set to
    -inf (also in the kept ``logits``), as Hugging Face's ``bad_words_ids`` do."""
    tokens = prefix
    finished = torch.zeros(prefix.shape[0], dtype=torch.bool, device=prefix.device)
    limits, n_steps = per_row_limits(max_new_tokens, prefix.shape[0], prefix.device)
    steps: list[Tensor] = []
    all_logits: list[Tensor] = []
    for step in range(n_steps):
        logits = next_logits(tokens).float()
        if suppress:
            logits[:, list(suppress)] = -math.inf
        if keep_logits:
            all_logits.append(logits)
        choice = choose_next(logits, sampling, generator).masked_fill(finished, pad_id)
        steps.append(choice)
        tokens = torch.cat([tokens, choice[:, None]], dim=1)
        finished |= choice == eos_id
        finished |= limits <= step + 1
        stop = on_step(choice) if on_step is not None else False
        if stop or bool(finished.all()):
            break
    new = torch.stack(steps, dim=1) if steps else prefix.new_zeros(prefix.shape[0], 0)
    return Generated(new, torch.stack(all_logits, dim=1) if keep_logits and all_logits else None)


def per_row_limits(max_new_tokens: int | Tensor, batch: int, device: torch.device) -> tuple[Tensor, int]:
    """``max_new_tokens`` (one number or (batch,)) as a (batch,) tensor, and the steps needed."""
    limits = torch.as_tensor(max_new_tokens, device=device).expand(batch)
    if isinstance(max_new_tokens, int):
        return limits, max_new_tokens
    return limits, int(limits.max()) if batch else 0


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


LENGTH_PENALTIES = ("gnmt", "simple", "none")


@dataclass(frozen=True)
class LengthPenalty:
    """lp(|y|) by which beam search divides a hypothesis' log-probability: score(y) =
    log P(y | x) / lp(|y|).

    ``gnmt``: lp = ((5 + |y|) / 6)^alpha (Wu et al. 2016, the paper's alpha = 0.6);
    ``simple``: lp = |y|^alpha (Hugging Face's ``length_penalty``, fairseq's ``lenpen``);
    ``none``: lp = 1. |y| counts the generated tokens, EOS included, the start token not.
    With alpha > 0 longer hypotheses are favoured over the plain log-probability.
    """

    kind: str = "gnmt"
    alpha: float = 0.6

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_PENALTIES:
            kinds = ", ".join(LENGTH_PENALTIES)
            raise ValueError(f"length penalty kind must be one of {kinds}, got {self.kind!r}")
        if not math.isfinite(self.alpha):
            raise ValueError(f"length penalty alpha must be a finite number, got {self.alpha}")

    def __call__(self, length: Tensor) -> Tensor:
        """lp of each length in ``length`` (any shape), as float32 (the dtype of the scores)."""
        length = length.float()
        if self.kind == "gnmt":
            return ((5.0 + length) / 6.0) ** self.alpha
        if self.kind == "simple":
            return length**self.alpha
        return torch.ones_like(length)


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
    decoding: Reorderable,
    prefix: Tensor,
    max_new_tokens: int | Tensor,
    eos_id: int,
    pad_id: int,
    beam: int = 4,
    n_best: int = 1,
    length_penalty: LengthPenalty = LengthPenalty("none"),
    early_stopping: bool = True,
    suppress: Sequence[int] = (),
) -> Beams:
    """Beam search: approximately argmax_y log P(y | prefix) / lp(|y|), ``beam`` hypotheses per row.

    ``decoding`` holds state for the ``batch`` rows of ``prefix`` (batch, t). The first step
    is one call of ``decoding.next_logits`` on those rows (the ``beam`` hypotheses are all the
    prefix then); every later step is one call on (rows still searching)·beam rows, each row's
    ``beam`` hypotheses adjacent. A row is searched until it is done, then dropped from the
    model's batch.

    The convention is Hugging Face's ``generate(num_beams=beam, length_penalty=alpha)`` with
    a ``simple`` penalty (transformers 5.x ``GenerationMixin._beam_search``):

    - Scores are sums of log_softmax of the float32 logits. At the first step only one
      of the identical hypotheses is expanded. The ids in ``suppress`` get a log-probability
      of -inf after the log_softmax (HF's ``bad_words_ids``, which process log-probabilities).
    - Each step ranks all beam·vocab continuations of a row and keeps the best 2·beam
      candidates. The best ``beam`` of them that do not end become the running hypotheses.
    - A candidate ending in EOS joins the row's finished hypotheses (the best ``beam`` are
      kept) only if it ranks among the first ``beam`` of the 2·beam, with score
      sum / lp(|y|), |y| = generated tokens including EOS (not the start token).
    - At the row's ``max_new_tokens`` (one number, or one per row (batch,)) every candidate
      ends: the first ``beam`` of them join the finished hypotheses as they are.
    - ``early_stopping=True`` (HF's ``early_stopping=True``): a row is done as soon as it has
      ``beam`` finished hypotheses. ``early_stopping=False``: it is done only when no running
      hypothesis can still beat the worst finished one, whose bound is the best running
      sum divided by the largest lp over the lengths it could still reach (log-probabilities
      are <= 0); this returns what HF's ``early_stopping="never"`` returns.

    ``beam=1`` is greedy search. Returns the ``n_best`` (<= ``beam``) best finished
    hypotheses of each row, best first (a slot no hypothesis of nonzero probability reached,
    possible only when fewer than 2·beam tokens can follow, has score -inf and length 0).
    """
    if beam < 1:
        raise ValueError(f"beam must be >= 1, got {beam}")
    if not 1 <= n_best <= beam:
        raise ValueError(f"n_best must be in [1, beam={beam}], got {n_best}")
    batch, start = prefix.shape
    device = prefix.device
    limits, n_steps = per_row_limits(max_new_tokens, batch, device)
    if batch and int(limits.min()) < 1:
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
    for step in range(n_steps):
        if not alive.numel():
            break
        (rows, hyps), t = running.shape, start + step
        logits = decoding.next_logits(seqs[:, :, :t].reshape(rows * hyps, t)).float()
        vocab = logits.shape[-1]
        log_probs = logits.log_softmax(dim=-1)
        if suppress:
            log_probs[:, list(suppress)] = -math.inf
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
        joins = ends & (torch.arange(width, device=device) < beam) & (cand_scores > -math.inf)
        if bool(joins.any()):  # most steps end no hypothesis: skip the merge
            lp = length_penalty(torch.tensor(step + 1, device=device))
            scores = torch.where(joins, cand_scores / lp, -math.inf)
            merged_scores = torch.cat([done_scores[alive], scores], dim=1)
            best = merged_scores.topk(beam, dim=1).indices
            done_scores[alive] = _take(merged_scores, best)
            done_filled[alive] = _take(torch.cat([done_filled[alive], joins], dim=1), best)
            new_lengths = torch.full_like(token, step + 1)
            done_lengths[alive] = _take(torch.cat([done_lengths[alive], new_lengths], dim=1), best)
            new_tokens = cand_seqs[:, :, start:]
            done_tokens[alive] = _take(torch.cat([done_tokens[alive], new_tokens], dim=1), best)
        finished = done_filled[alive].all(dim=1)
        if not early_stopping:  # lp is monotonic: its largest value is at one end of the lengths left
            lp_next = length_penalty(torch.tensor(step + 2, device=device))
            bound = running[:, 0] / torch.maximum(lp_next, length_penalty(limits[alive]))
            finished &= bound <= done_scores[alive].amin(dim=1)
        finished |= at_limit
        searching = (~finished).nonzero().squeeze(1)
        alive, running, seqs = alive[searching], running[searching], seqs[searching]
        sources = searching if searching.numel() < rows else None
        decoding.reorder((searching[:, None] * hyps + parent[searching]).flatten(), sources)
    length = int(done_lengths[:, :n_best].max()) if batch else 0
    return Beams(done_tokens[:, :n_best, :length], done_scores[:, :n_best], done_lengths[:, :n_best])


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


def translate_ids(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int | Tensor,
    use_cache: bool = True,
    keep_logits: bool = False,
    sampling: Sampling | None = None,
    generator: torch.Generator | None = None,
    suppress: Sequence[int] = (),
) -> Generated:
    """Greedy translation of a padded batch of source ids, starting from BOS, or sampled
    translations with ``sampling`` (drawn from ``generator``); the ids in ``suppress`` are never
    generated (see :func:`generate`)."""
    model.eval()
    prefix = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    return generate(
        seq2seq_next_logits(model, src, use_cache),
        prefix,
        max_new_tokens,
        eos_id,
        model.config.pad_id,
        sampling=sampling,
        generator=generator,
        keep_logits=keep_logits,
        suppress=suppress,
    )


def translate_beam_ids(
    model: Transformer,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_new_tokens: int | Tensor,
    beam: int = 4,
    n_best: int = 1,
    length_penalty: LengthPenalty = LengthPenalty(),
    use_cache: bool = True,
    early_stopping: bool = True,
    suppress: Sequence[int] = (),
) -> Beams:
    """Beam search translation (:func:`beam_search`) of a padded batch of source ids, from BOS;
    the ids in ``suppress`` are never generated."""
    model.eval()
    prefix = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
    return beam_search(
        seq2seq_decoding(model, src, use_cache), prefix, max_new_tokens, eos_id, model.config.pad_id,
        beam, n_best, length_penalty, early_stopping, suppress,
    )  # fmt: skip


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
