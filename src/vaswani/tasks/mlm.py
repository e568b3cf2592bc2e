"""Masked language modelling (BERT's pretraining): the masking recipe, the task adapter, and the
model that uses a run (fill-mask).

The text (the user's files, or Python's own documentation by default: :mod:`vaswani.data.text`)
is split by a WordPiece tokenizer trained on it, and each document's pieces are cut into windows
``[CLS] x_1 … x_n [SEP]`` of at most ``max_len`` tokens (whole documents, never two in one
window). BERT's recipe (Devlin et al. 2019, section 3.1) corrupts each window x into x̃:

    c_i ~ Bernoulli(p) at every real token (never [CLS], [SEP] or padding)   p = mask_prob (15%)
    x̃_i = [MASK]            if c_i and u_i < 1 - r - k                       (80%)
    x̃_i = a random token    if c_i and 1 - r - k <= u_i < 1 - k              r = mask_random (10%)
    x̃_i = x_i               otherwise                                         k = mask_keep (10%)

with u_i ~ U(0, 1), and the loss is the cross-entropy of the original token at the chosen
positions only, L = -Σ_{i: c_i} log P(x_i | x̃). The masks are drawn afresh each time a batch is
seen (dynamic masking, as RoBERTa), from the global generator that the trainer seeds and saves
in each checkpoint, so that a resumed run draws the masks the uninterrupted one would have. The
validation windows are masked once, by their own seeded generator, so that every evaluation
scores the same predictions: the masked-token loss, its perplexity and the masked-token accuracy.
With ``nsp`` (``--nsp``) the examples are sentence pairs and the model also learns next-sentence
prediction: :mod:`vaswani.pipelines.nsp`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig, padded_vocab_size
from vaswani.data.batching import pad, token_buckets
from vaswani.data.config import TextData
from vaswani.data.text import read_documents
from vaswani.errors import ConfigError, DataError
from vaswani.models.bert import MaskedLM
from vaswani.pipelines.bert import TOKENIZER, check_tokenizer, save_tokenizer
from vaswani.pipelines.lm_text import split_text
from vaswani.pipelines.mlm import (
    TASK,
    MaskedLanguageModel,
    Masker,
    fill_mask_lines,
    masked_batches,
    masked_metrics,
    text_windows,
)
from vaswani.pipelines.nsp import (
    Masking,
    PairBatch,
    check_documents,
    check_nsp_model,
    draw_pairs,
    masked_pair_batches,
    pair_batches,
    pretraining_metrics,
    tokenized_documents,
)
from vaswani.recipes import Sections
from vaswani.runtime import Resolved
from vaswani.tasks.evaluation import Evaluation, Report
from vaswani.tasks.settings import text_recipe, text_run
from vaswani.tokenizer import WordPieceTokenizer
from vaswani.training.progress import Stage
from vaswani.training.trainer import fit_run

FILL_MASK_EXAMPLE = "The [MASK] statement exits a loop."


def masked_lm_loss(
    model: nn.Module,
    tokens: Tensor,
    inputs: Tensor,
    chosen: Tensor,
    pad_id: int,
    vocab_size: int | None = None,
) -> tuple[Tensor, int]:
    """L = -Σ_{i: c_i} log P(x_i | x̃) over the chosen positions, and their count: decoder and loss in
    one chunked pass (``MaskedLM.forward``'s ``targets``, inside the forward DDP and FSDP see)."""
    targets = tokens[chosen]
    mask = inputs != pad_id
    loss = model(inputs, attention_mask=mask, predict=chosen, targets=targets, n_classes=vocab_size)
    return loss, len(targets)


class MLMTask:
    """Masked-token prediction on the windows of the training text, batched by
    ``batch_tokens`` with length bucketing; validation on at most ``eval_sentences`` windows."""

    batch_flag = "--batch-tokens"  # what to lower when a step runs out of memory

    def __init__(
        self,
        run: RunConfig,
        tokenizer: WordPieceTokenizer,
        train_windows: Sequence[Sequence[int]],
        valid_windows: Sequence[Sequence[int]],
    ) -> None:
        if not train_windows or not valid_windows:
            raise DataError("the text has no tokens to train or validate on")
        self.pad_id, self.vocab_size = tokenizer.pad_id, tokenizer.vocab_size
        self.masker = Masker.of(tokenizer, run.data)
        lengths = [len(w) for w in train_windows]
        self.batches = [
            pad([train_windows[i] for i in indices], self.pad_id)
            for indices in token_buckets(lengths, run.train.batch_tokens, run.train.seed)
        ]
        valid = valid_windows[: run.train.eval_sentences]
        self.valid = masked_batches(valid, self.masker, self.pad_id, run.train.batch_tokens, run.train.seed)
        if not any(batch.chosen.any() for batch in self.valid):
            raise DataError("the validation text is too short: no token of it was chosen for prediction")

    def train_batches(self) -> list[Tensor]:
        return self.batches

    def loss(self, model: nn.Module, batch: Tensor) -> tuple[Tensor, int]:
        inputs, chosen = self.masker(batch)
        return masked_lm_loss(model, batch, inputs, chosen, self.pad_id, self.vocab_size)

    def batch_tokens(self, batch: Tensor) -> int:
        return int((batch != self.pad_id).sum())

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return masked_metrics(model, self.valid, self.pad_id, self.vocab_size)


def train_mlm(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False, device: Resolved = None
) -> tuple[dict[str, Any], MaskedLanguageModel, str]:
    """Train (or, with ``resume``, continue) a masked language model in ``run_dir``; return the
    metrics, the model and the name of its text. A new run trains its WordPiece tokenizer on the
    training text and pads the vocabulary to a multiple of 64."""
    train_docs, valid_docs, name = split_text(run.data, check_documents if run.data.nsp else None)
    max_len = run.model.max_len
    if resume:
        tokenizer = WordPieceTokenizer.load(run_dir / TOKENIZER, max_len)
    else:
        with Stage(f"training a WordPiece tokenizer on {len(train_docs):,} documents", quiet=quiet):
            tokenizer = WordPieceTokenizer.train(train_docs, run.data.vocab_size, max_len=max_len)
        vocab = padded_vocab_size(tokenizer.vocab_size)
        model_cfg = run.model.replace(vocab_size=vocab, pad_id=tokenizer.pad_id)
        run = RunConfig(run.task, model_cfg, run.train, run.data)
    check_tokenizer(run, tokenizer, run_dir)
    task: MLMTask | NSPTask
    if run.data.nsp:
        train = run.train
        masker = Masker.of(tokenizer, run.data)
        task = NSPTask(
            tokenizer,
            masker,
            train_docs,
            valid_docs,
            max_len,
            train.batch_tokens,
            train.seed,
            train.eval_sentences,
        )
    else:
        task = MLMTask(
            run,
            tokenizer,
            text_windows(tokenizer, train_docs, max_len),
            text_windows(tokenizer, valid_docs, max_len),
        )
    metrics, model = fit_run(
        run,
        run_dir,
        task,
        lambda: MaskedLM(run.model, nsp=run.data.nsp),
        lambda d: save_tokenizer(tokenizer, d),
        resume,
        quiet,
        device=device,
    )
    assert isinstance(model, MaskedLM)
    return metrics, MaskedLanguageModel(model.eval(), tokenizer, run.data), name


def evaluate_run(run_dir: Path, request: Evaluation) -> Report:
    """Masked-token loss, perplexity and accuracy of an ``mlm`` run on ``request.text``."""
    if not request.text:
        raise ConfigError("a masked language model is evaluated with --text FILE")
    mlm = MaskedLanguageModel.load(run_dir, request.device)
    metrics = mlm.evaluate(read_documents([str(t) for t in request.text]))
    line = (
        f"masked-token loss {metrics.get('masked_loss', metrics['valid_loss']):.4f}  perplexity "
        f"{metrics['perplexity']:.2f}  accuracy {metrics['masked_accuracy']:.1%}  (BERT's masking, seed 0)"
    )
    if "nsp_accuracy" not in metrics:
        return Report([line])
    return Report(
        [
            line,
            f"next-sentence loss {metrics['nsp_loss']:.4f}  accuracy {metrics['nsp_accuracy']:.1%}  "
            "(sentence pairs of the documents, half IsNext, seed 0)",
        ]
    )


def recipe(flags: Sections) -> str:
    """The embedded default job, or the recipe for the user's text once ``--text`` is given."""
    return text_recipe(TASK, flags)


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """A masked-LM run: an encoder-only model; ``--text`` is stored absolute and read as the source.
    With ``--nsp`` the model has the pooler (that the NSP head reads), two segments or more, and a
    ``max_len`` of at least 5 (``[CLS] a [SEP] b [SEP]``)."""
    nsp = bool(sections.get("data", {}).get("nsp", False))
    model = sections.setdefault("model", {})
    if nsp and "pooler" not in flags.get("model", {}):
        model["pooler"] = True
    run = text_run(TASK, "encoder_only", TextData, sections, flags, source)
    if nsp:
        check_nsp_model(run.model)
    return run


def finish(
    result: tuple[dict[str, Any], MaskedLanguageModel, str], run_dir: Path, started: float, quiet: bool
) -> list[str]:
    """The report after training: the masked-token scores and one sentence filled in."""
    metrics, mlm, name = result
    nsp = f"  next-sentence accuracy {metrics['nsp_accuracy']:.1%}" if "nsp_accuracy" in metrics else ""
    return [
        f"\nmasked-token loss {metrics.get('masked_loss', metrics['valid_loss']):.3f}  perplexity "
        f"{metrics['perplexity']:.1f}  accuracy {metrics['masked_accuracy']:.1%}{nsp}  ({name}, "
        f"{metrics['steps']} steps, {metrics['tokens_per_second']:,.0f} tokens/s, total "
        f"{time.perf_counter() - started:.0f} s)\n",
        *fill_mask_lines(FILL_MASK_EXAMPLE, mlm.fill_mask(FILL_MASK_EXAMPLE)),
        f'\nrun directory: {run_dir}\n  vaswani fill-mask {run_dir} "{FILL_MASK_EXAMPLE}"',
    ]


class NSPTask:
    """Masked-token and next-sentence prediction on the pairs of the training documents (drawn
    once, by ``seed``), batched by ``batch_tokens``; validation on at most ``eval_sentences``
    pairs of the validation documents, corrupted once."""

    batch_flag = "--batch-tokens"  # what to lower when a step runs out of memory

    def __init__(
        self,
        tokenizer: WordPieceTokenizer,
        masker: Masking,
        train_texts: Sequence[str],
        valid_texts: Sequence[str],
        max_len: int,
        batch_tokens: int,
        seed: int,
        eval_sentences: int,
    ) -> None:
        train_docs = tokenized_documents(tokenizer, train_texts)
        valid_docs = tokenized_documents(tokenizer, valid_texts)
        self.pad_id, self.vocab_size, self.masker = tokenizer.pad_id, tokenizer.vocab_size, masker
        train = draw_pairs(train_docs, seed, valid_docs)
        valid = draw_pairs(valid_docs, seed, train_docs)[:eval_sentences]
        self.batches = pair_batches(train, tokenizer, max_len, batch_tokens, seed)
        self.valid = masked_pair_batches(valid, tokenizer, masker, max_len, batch_tokens, seed)
        if not any(batch.chosen is not None and batch.chosen.any() for batch in self.valid):
            raise DataError("the validation text is too short: no token of it was chosen for prediction")

    def train_batches(self) -> list[PairBatch]:
        return self.batches

    def loss(self, model: nn.Module, batch: PairBatch) -> tuple[Tensor, int]:
        """L_MLM + L_NSP · n / r (see the module docstring) and n, the chosen tokens."""
        inputs, chosen = self.masker(batch.tokens, None)
        targets = batch.tokens[chosen]
        masked, nsp = model(
            inputs,
            batch.segments,
            inputs != self.pad_id,
            predict=chosen,
            next_sentence=True,
            targets=targets,
            n_classes=self.vocab_size,
        )
        pairs = F.cross_entropy(nsp.float(), batch.labels, reduction="sum")
        return masked + pairs * len(targets) / len(batch.labels), len(targets)

    def batch_tokens(self, batch: PairBatch) -> int:
        return int((batch.tokens != self.pad_id).sum())

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return pretraining_metrics(model, self.valid, self.pad_id, self.vocab_size)
