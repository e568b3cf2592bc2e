"""Training a translation run on from another (``--init RUN_DIR``), with the token-level loss or
with minimum risk training (``--objective mrt``; Shen et al. 2016, Edunov et al. 2018).

For each source x of a batch, ``data.mrt_candidates`` = k candidates u are found without gradients
in eval mode (beam search, or samples at temperature 1: ``data.mrt_search``); equal candidates are
merged into one. Each costs c(u) = 1 − sentence BLEU(u, t) / 100 (sacreBLEU's, exponential
smoothing, on the detokenised text, with the run's BLEU tokenizer) or 1 − sentence chrF / 100
(``data.mrt_cost``), t the reference. With log P(u | x) = Σ_t log P(u_t | u_<t, x) (EOS included
where u ended), teacher-forced with gradients::

    q(u)    = P(u | x)^α / Σ_u' P(u' | x)^α        over the merged candidates of x
    risk(x) = Σ_u q(u) c(u)
    L       = w · L_token + (1 − w) · mean_x risk(x)

α is ``data.mrt_alpha``: 1 by default, the candidates' renormalised probabilities of Edunov et al.
over a beam (Shen et al. sharpen 100 samples with α = 5e-3); w is ``data.mrt_weight``, 0.3 by
default (Edunov et al.'s weighted combination), and L_token the run's label-smoothed cross-entropy
per token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from torch import Tensor, nn

from vaswani.config import ModelConfig, RunConfig
from vaswani.data.batching import Seq2SeqBatch
from vaswani.data.config import ParallelData
from vaswani.generation.config import DecodingConfig
from vaswani.generation.logprobs import sequence_log_probs
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.io import load_weights
from vaswani.metrics import sentence_scores
from vaswani.pipelines.translation import SRC_TOKENIZER, TASK, TGT_TOKENIZER, Translator, translation_model
from vaswani.rundir import RunDir
from vaswani.tokenizer import TextTokenizer
from vaswani.training.selection import chosen_weights

Candidate = tuple[int, ...]


class TokenTask(Protocol):
    """What minimum risk training takes from the translation task."""

    src_tok: TextTokenizer
    tgt_tok: TextTokenizer
    bleu_tokenize: str
    pad_id: int

    def train_batches(self) -> list[Seq2SeqBatch]: ...

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> tuple[Tensor, int]: ...

    def batch_tokens(self, batch: Seq2SeqBatch) -> int: ...

    def evaluate(self, model: nn.Module) -> dict[str, float]: ...


CORPUS = (
    "source", "seed", "n_train", "n_valid", "n_test", "src", "tgt", "valid_src", "valid_tgt", "test_src",
    "test_tgt", "pairs", "columns",
)  # fmt: skip
"""The data fields that name a corpus and its splits."""


def initialised(
    run: RunConfig,
    task: str = TASK,
    data_class: type[ParallelData] = ParallelData,
    build: Callable[[ModelConfig], nn.Module] = translation_model,
    inherited: Sequence[str] = CORPUS,
) -> tuple[RunConfig, TextTokenizer, TextTokenizer, nn.Module]:
    """A run that starts from ``run.data.init`` (a run of ``task``, its data section ``data_class``):
    that run's model config, BLEU tokenizer, tokenizers and model (``build``) with its chosen weights
    (the best by its ``select_by``, else the last), and its ``inherited`` data fields (its corpus)
    where ``run`` names no corpus (the recipe's embedded default)."""
    folder = RunDir(str(run.data.init))  # type: ignore[attr-defined]
    base = folder.read_config(task, data_class)
    src_tok = TextTokenizer.load(folder.file(SRC_TOKENIZER))
    tgt_tok = TextTokenizer.load(folder.file(TGT_TOKENIZER))
    model = build(base.model)
    load_weights(model, chosen_weights(folder, base.train.select_by)[0])
    data = run.data.replace(bleu_tokenize=base.data.bleu_tokenize)  # type: ignore[union-attr]
    if data.source == "default":  # no corpus of its own: go on with the --init run's
        data = data.replace(**{name: getattr(base.data, name) for name in inherited})
    return RunConfig(run.task, base.model, run.train, data), src_tok, tgt_tok, model


def merged(rows: Sequence[Sequence[int]], eos_id: int, pad_id: int) -> list[Candidate]:
    """The distinct candidates of ``rows`` (decoded token ids, padded), first seen first: each up to
    and with its first EOS (or up to its padding, where it reached its budget without one)."""
    out: dict[Candidate, None] = {}
    for row in rows:
        ids = list(row)
        end = ids.index(eos_id) + 1 if eos_id in ids else (ids.index(pad_id) if pad_id in ids else len(ids))
        out[tuple(ids[:end])] = None
    return list(out)


def expected_risk(log_probs: Tensor, costs: Tensor, sizes: Sequence[int], alpha: float) -> Tensor:
    """risk(x) = Σ_u q(u) c(u) (groups,) with q = softmax(α log P) within each group of ``sizes``
    consecutive candidates (``log_probs`` and ``costs`` (N,), N = sum(sizes))."""
    risks, start = [], 0
    for size in sizes:
        q = (alpha * log_probs[start : start + size]).softmax(dim=0)
        risks.append((q * costs[start : start + size]).sum())
        start += size
    return torch.stack(risks)


def _inner(model: nn.Module) -> nn.Module:
    """The translation model inside the trainer's wrappers (torch.compile, DDP)."""
    model = getattr(model, "_orig_mod", model)
    return getattr(model, "module", model)


class MinimumRiskTask:
    """The translation task ``task`` (its batches, evaluation and token-level loss) with the loss
    w · L_token + (1 − w) · risk (see the module docstring), as ``settings`` say."""

    batch_flag = "--batch-tokens"

    def __init__(self, task: TokenTask, settings: ParallelData) -> None:
        self.task, self.settings = task, settings
        self.src_tok, self.tgt_tok, self.bleu_tokenize = task.src_tok, task.tgt_tok, task.bleu_tokenize
        self.pad_id = task.pad_id

    def train_batches(self) -> list[Seq2SeqBatch]:
        return self.task.train_batches()

    def batch_tokens(self, batch: Seq2SeqBatch) -> int:
        return self.task.batch_tokens(batch)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return self.task.evaluate(model)

    def loss(self, model: nn.Module, batch: Seq2SeqBatch) -> tuple[Tensor, int]:
        token_sum, tokens = self.task.loss(model, batch)
        risk = self.risks(model, batch)
        weight = self.settings.mrt_weight
        return weight * token_sum + (1 - weight) * risk.sum() * (tokens / batch.src.shape[0]), tokens

    def risks(self, model: nn.Module, batch: Seq2SeqBatch) -> Tensor:
        """risk(x) (batch,) of each source of ``batch``."""
        groups = self.candidates(model, batch.src)
        refs = [self.tgt_tok.decode(row) for row in batch.tgt_out.tolist()]
        hyps = [self.tgt_tok.decode(list(u)) for group in groups for u in group]
        owners = [row for row, group in enumerate(groups) for _ in group]
        scores = sentence_scores(hyps, [refs[i] for i in owners], self.settings.mrt_cost, self.bleu_tokenize)
        costs = 1.0 - torch.tensor(scores, device=batch.src.device) / 100.0
        flat = [u for group in groups for u in group]
        src = batch.src.index_select(0, torch.tensor(owners, device=batch.src.device))
        log_probs = sequence_log_probs(model, src, flat, self.tgt_tok.bos_id, self.pad_id)
        return expected_risk(log_probs, costs, [len(g) for g in groups], self.settings.mrt_alpha)

    @torch.no_grad()
    def candidates(self, model: nn.Module, src: Tensor) -> list[list[Candidate]]:
        """Each source row's merged candidates, found in eval mode (the model is left in training
        mode); samples draw from a generator seeded from torch's, so that a resumed run draws the same."""
        inner, k = _inner(model), self.settings.mrt_candidates
        bos, eos = self.tgt_tok.bos_id, self.tgt_tok.eos_id
        suppress = Translator(inner, self.src_tok, self.tgt_tok).suppressed  # type: ignore[arg-type]
        if self.settings.mrt_search == "beam":
            found = translate_beam_ids(
                inner,
                src,
                bos,
                eos,
                DecodingConfig(strategy="beam", beam=k, n_best=k),
                suppress,  # type: ignore[arg-type]
            )
            kept = (found.scores > float("-inf")).tolist()  # a slot no hypothesis reached is empty
            rows = [
                [u[:n] for u, n, k in zip(us, ns, ks, strict=True) if k]
                for us, ns, ks in zip(found.tokens.tolist(), found.lengths.tolist(), kept, strict=True)
            ]
        else:
            generator = torch.Generator(src.device).manual_seed(int(torch.randint(2**62, ())))
            drawn = translate_ids(
                inner,
                src.repeat_interleave(k, dim=0),
                bos,
                eos,  # type: ignore[arg-type]
                DecodingConfig(strategy="sample", temperature=1.0),
                generator,
                suppress=suppress,
            ).tokens.tolist()
            rows = [drawn[i * k : (i + 1) * k] for i in range(src.shape[0])]
        model.train()
        return [merged(group, eos, self.pad_id) for group in rows]
