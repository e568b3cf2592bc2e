"""Mask-Predict (Ghazvininejad et al. 2019): parallel decoding of a conditional masked language model
(:class:`~vaswani.models.cmlm.CMLM`) in a fixed number of iterations.

For each source the ``length_beam`` most likely target lengths are candidates, each starting as
all [MASK]. Iteration 0 predicts every position (the argmax of one decoder pass); iteration t =
1 … T − 1 re-masks the n = ⌊N · (T − t) / T⌋ tokens of lowest probability (N the candidate's
length: the paper's linear schedule, :func:`remasked`) and predicts them again, each predicted token
keeping the probability it was predicted with. The candidate with the best average log-probability
is the translation (``rank_by="average"``, the paper's), or, with ``rank_by="joint"``, the one of the
best log P(y, N | x) = Σ_i log p(y_i) + log P(N | x): its tokens' log-probabilities summed and the
length classifier's log-probability of its length. Where the tokens are predicted confidently the
averages of the candidates hardly differ, and a candidate of the wrong length can win by a little:
on the en→zh corpus (a CMLM of 3,000 steps, T = 10, 500 test sentences) the average gave 98.21,
96.88 and 96.42 BLEU at l = 1, 3, 5, the joint 98.21, 98.30 and 98.30. With ``rank_by="teacher"``
an autoregressive model over the same vocabularies scores each candidate, log P(y | x) teacher-forced
(EOS included) in one parallel pass, and the best wins: the re-scoring of Gu et al. (2018)'s noisy
parallel decoding. It mends what the CMLM's own scores miss: at a length one off the reference's
the CMLM repeats or drops a token and is as sure of it as of the right translation (the teacher's
:func:`teacher_ranking`).

The candidates of a batch are decoded in groups of similar length (:func:`length_groups`), so that
one long candidate (the length beam's fifth choice is often far off) does not pad every row to its
length: each candidate's translation is what it would be alone. Each group projects its sources'
keys and values for cross-attention once (not once an iteration), and the output projection and
log-softmax run only at the positions an iteration predicts (every real one at iteration 0, then
fewer each iteration: 55% of them over T = 10): with an 8,000-token vocabulary they were about
two fifths of a pass's multiply-adds (3 + 3 layers, d_model 256).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from vaswani.errors import ConfigError, shown
from vaswani.generation.logprobs import sequence_log_probs
from vaswani.models.cmlm import CMLM
from vaswani.models.rnn import RNNTranslator
from vaswani.models.transformer import EncodedSource, Transformer

PAPER_ITERATIONS, PAPER_LENGTH_BEAM = 10, 5  # the paper's T = 10 and l = 5
MAX_ITERATIONS = 1000
RANKINGS = ("average", "joint", "teacher")  # the paper's; log P(y, N | x); an autoregressive teacher's
Rescore = Callable[[Tensor, Tensor, list[list[int]]], Tensor]
"""A teacher's scores (candidates,), higher better, of candidates (their ids, no EOS) of the sources
(batch, src_len), candidate i of source ``rows[i]`` (:func:`teacher_ranking`)."""
PADDING_SLACK = 1.25  # candidates decoded together waste at most a quarter of their cells on padding


@dataclass(frozen=True)
class MaskPredictConfig:
    """``iterations`` T (decoder passes, 1 … 1000) and ``length_beam`` l (length candidates of each
    source, at least 1 and below the model's length classes: checked by :func:`mask_predict`) and
    ``rank_by`` (``average``: the paper's; ``joint``: with the length's log-probability;
    ``teacher``: an autoregressive model's log P(y | x), given to :func:`mask_predict`), validated
    on construction; errors name the field as ``decoding.FIELD``."""

    iterations: int = PAPER_ITERATIONS
    length_beam: int = PAPER_LENGTH_BEAM
    rank_by: str = "average"

    def __post_init__(self) -> None:
        for name, most in (("iterations", MAX_ITERATIONS), ("length_beam", None)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"decoding.{name} must be an integer, got {shown(value)}")
            if value < 1 or (most is not None and value > most):
                bound = f"between 1 and {most}" if most is not None else ">= 1"
                raise ConfigError(f"decoding.{name} must be {bound}, got {value}")
        if self.rank_by not in RANKINGS:
            raise ConfigError(
                f"decoding.rank_by must be one of {', '.join(RANKINGS)}, got {shown(self.rank_by)}"
            )


@dataclass
class MaskPredictResult:
    """``tokens`` (batch, width): each source's translation, padded with the pad id past its
    ``lengths`` (batch,); ``scores`` (batch,): its average log-probability."""

    tokens: Tensor
    lengths: Tensor
    scores: Tensor


def remasked(lengths: Tensor, iterations: int, step: int) -> Tensor:
    """How many tokens iteration ``step`` (1 … T − 1) of ``iterations`` T re-masks in candidates of
    ``lengths``: ⌊N · (T − t) / T⌋, linearly fewer each iteration."""
    return lengths * (iterations - step) // iterations


def check_length_beam(config: MaskPredictConfig, model: CMLM) -> None:
    """Refuse a length beam wider than the lengths the model can predict (1 … max_len − 1)."""
    usable = model.length_classes - 1
    if config.length_beam > usable:
        raise ConfigError(
            f"decoding.length_beam {config.length_beam} is more than the run's {usable} target lengths "
            f"(1 … {usable}, from max_len {model.config.max_len})"
        )


@torch.no_grad()
def mask_predict(
    model: CMLM,
    src: Tensor,
    mask_id: int,
    config: MaskPredictConfig,
    suppress: tuple[int, ...] = (),
    lengths: Tensor | None = None,
    teacher: Rescore | None = None,
) -> MaskPredictResult:
    """Translate ``src`` (batch, src_len; padded with the model's pad id) by Mask-Predict, never
    producing the ids ``suppress`` (nor pad, [MASK] or lengths of 0). ``lengths`` (batch,), each 1 …
    max_len − 1, gives each source's target length: one candidate of that length, the length
    classifier and ``config.length_beam`` unused (what decoding would score with the right length).
    ``teacher`` scores the candidates where ``config.rank_by`` is ``teacher`` (a
    :class:`ConfigError` without one). Every tensor stays on the device of ``src``; the candidates'
    lengths are read from it once, to group them."""
    if config.rank_by == "teacher" and teacher is None:
        raise ConfigError("decoding.rank_by teacher needs the autoregressive run that scores the candidates")
    pad_id, device = model.config.pad_id, src.device
    n = src.shape[0]
    encoded = model.encode(src)
    if lengths is None:
        check_length_beam(config, model)
        beam = config.length_beam
        length_logits = model.length_logits(encoded).float()
        length_logits[:, 0] = float("-inf")
        length_logp, lengths = length_logits.log_softmax(1).topk(beam, dim=1)
        length_logp, lengths = length_logp.reshape(-1), lengths.reshape(-1)  # (batch · beam,), best first
    else:
        beam, lengths = 1, lengths.to(device)
        length_logp = torch.zeros(lengths.shape, device=device)
    rows = torch.arange(n, device=device).repeat_interleave(beam)
    order = lengths.argsort(stable=True)
    groups = [
        Candidates.start(model, order[a:b], lengths, encoded, rows, mask_id, pad_id)
        for a, b in length_groups(lengths[order].tolist())
    ]
    banned = torch.tensor(sorted({pad_id, mask_id, *suppress}), device=device)
    for step in range(config.iterations):
        for group in groups:
            group.iterate(model, step, config.iterations, banned, mask_id)
    width = int(lengths.max()) if n else 0
    tokens = torch.full((n * beam, width), pad_id, dtype=torch.long, device=device)
    logp = torch.zeros(tokens.shape, device=device)
    for group in groups:
        tokens[group.index, : group.width] = group.tokens
        logp[group.index, : group.width] = group.logp
    scores = logp.sum(1) / lengths
    if config.rank_by == "teacher" and teacher is not None:  # by group: one far length pads no other
        ranked = torch.empty(scores.shape, device=device)
        for group in groups:
            ids = [row[:k] for row, k in zip(group.tokens.tolist(), group.lengths.tolist(), strict=True)]
            ranked[group.index] = teacher(src, rows[group.index], ids).to(device)
    else:
        ranked = scores if config.rank_by == "average" else logp.sum(1) + length_logp
    chosen = torch.arange(n, device=device) * beam + ranked.view(n, beam).argmax(1)
    kept = int(lengths[chosen].max()) if n else 0
    return MaskPredictResult(tokens[chosen, :kept], lengths[chosen], scores[chosen])


def teacher_ranking(teacher: Transformer | RNNTranslator, bos_id: int, eos_id: int) -> Rescore:
    """The :data:`Rescore` of an autoregressive ``teacher`` (in eval mode, its vocabularies the
    CMLM's): log P(y EOS | x), each candidate teacher-forced from ``bos_id`` and ended by ``eos_id``,
    all of a group's candidates decoded in one pass, each source encoded once by a Transformer
    (:func:`~vaswani.generation.logprobs.sequence_log_probs`)."""

    def score(src: Tensor, rows: Tensor, candidates: list[list[int]]) -> Tensor:
        with_eos = [[*ids, eos_id] for ids in candidates]
        return sequence_log_probs(teacher, src, with_eos, bos_id, teacher.config.pad_id, rows)

    return score


def length_groups(lengths: list[int], slack: float = PADDING_SLACK) -> list[tuple[int, int]]:
    """Consecutive runs [a, b) of ``lengths`` (ascending) decoded together: a run grows while its
    padded cells (its longest length × its rows) stay within ``slack`` × its real cells."""
    groups, start, total = [], 0, 0
    for i, length in enumerate(lengths):
        if i > start and length * (i + 1 - start) > slack * (total + length):
            groups.append((start, i))
            start, total = i, 0
        total += length
    return [*groups, (start, len(lengths))] if lengths else []


@dataclass
class Candidates:
    """Candidates of similar length decoded together: rows ``index`` of the batch · beam
    candidates, their ``lengths``, ``tokens`` and each token's ``logp`` (rows, width), ``real``
    (its positions within its length) and ``source``, each row's encoded source with its cross
    cache."""

    index: Tensor
    lengths: Tensor
    real: Tensor
    tokens: Tensor
    logp: Tensor
    source: EncodedSource

    @property
    def width(self) -> int:
        return self.tokens.shape[1]

    @classmethod
    def start(
        cls,
        model: CMLM,
        index: Tensor,
        lengths: Tensor,
        encoded: EncodedSource,
        rows: Tensor,
        mask_id: int,
        pad_id: int,
    ) -> Candidates:
        """The candidates ``index`` of ``lengths``, all [MASK]: ``rows`` maps a candidate to its source,
        whose keys and values each layer's cross-attention projects once (``model``'s cross cache)."""
        own = lengths[index]
        real = torch.arange(int(own.max()), device=own.device) < own[:, None]
        cache = model.decoder.new_cross_cache()
        source = EncodedSource(encoded.memory[rows[index]], encoded.mask[rows[index]], cache)
        tokens = torch.where(real, mask_id, pad_id)
        return cls(index, own, real, tokens, torch.zeros(tokens.shape, device=own.device), source)

    def iterate(self, model: CMLM, step: int, iterations: int, banned: Tensor, mask_id: int) -> None:
        """Iteration ``step``: re-mask the lowest-probability tokens (none at step 0: every position is
        [MASK]) and predict them again, each keeping the probability it was predicted with."""
        masked = self.real
        if step > 0:
            rank = torch.where(self.real, self.logp, float("inf")).argsort(dim=1, stable=True).argsort(1)
            masked = rank < remasked(self.lengths, iterations, step)[:, None]
            self.tokens = torch.where(masked, mask_id, self.tokens)
        logits, _ = model.decode(self.tokens, self.source, predict=masked)  # (masked, vocab)
        logits = logits.float().index_fill_(-1, banned, float("-inf"))
        best_logp, best = logits.log_softmax(-1).max(-1)
        self.tokens = self.tokens.masked_scatter(masked, best)
        self.logp = self.logp.masked_scatter(masked, best_logp)
