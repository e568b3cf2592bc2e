"""Sequence-level uses of BERT: text classification (fine-tuning) and sentence embeddings.

A classifier reads a text as ``[CLS] A [SEP]``, or a sentence pair as ``[CLS] A [SEP] B [SEP]``
with segment ids 0 then 1, and predicts

    p(y | x) = softmax(W_c · Dropout(v(x)) + b_c)

from one vector v(x) of the encoder's hidden states h: the pooled [CLS] state
tanh(W_p h_[CLS] + b_p) (``pool="cls"``, BERT's) or the mean of the real tokens' states
(``pool="mean"``). The encoder starts from a pretrained run (``mlm`` or ``encoder``: its BERT
weights, tokenizer and model config; a pooler the run lacks is initialised afresh, as Hugging
Face's ``BertForSequenceClassification`` does on a ``BertForMaskedLM`` checkpoint) or from
scratch, with a WordPiece tokenizer trained on the training texts. Fine-tuning minimises the
summed cross-entropy of the gold labels; the dev set is scored by accuracy and macro-F1, the
mean over classes of F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c) (over the classes that occur in the
gold labels or the predictions).

Sentence embeddings of any BERT run are :mod:`vaswani.tasks.encoder`'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import LabeledData
from vaswani.data.labeled import Example, LabeledFile, read_labeled
from vaswani.errors import ConfigError, DataError
from vaswani.metrics import accuracy_and_macro_f1
from vaswani.models.bert import BertClassifier
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device
from vaswani.tasks.bert import (
    TOKENIZER,
    TextBatch,
    check_tokenizer,
    encode_texts,
    read_bert_run,
    save_tokenizer,
    text_batch,
)
from vaswani.tasks.evaluation import Evaluation, on_model_device
from vaswani.tasks.finetune import (
    encoder_builder,
    epoch_settings,
    fine_tuning_rules,
    init_recipe,
    length_batches,
    pretrained_bert,
    scratch_encoder,
)
from vaswani.tasks.settings import validated
from vaswani.tokenizer import WordPieceTokenizer
from vaswani.training.trainer import fit_run

TASK = "classify"


@dataclass
class Examples:
    """A classifier's training and dev examples and its label set (the classes, in order)."""

    train: LabeledFile
    dev: LabeledFile
    labels: tuple[str, ...]


def load_labeled(spec: LabeledData) -> Examples:
    """Read the training file, take its sorted label set (or the run's, ``spec.labels``), and read
    the dev file with the same columns, refusing labels the training file does not have."""
    if spec.train_file is None or spec.dev_file is None:
        raise ConfigError("config field 'data.train_file': a classifier needs --train and --dev files")
    train = read_labeled(spec.train_file, spec.text_columns, spec.label_column, spec.file_format, spec.labels)
    labels = spec.labels or train.labels
    if len(labels) < 2:
        raise DataError(
            f"{spec.train_file}: every example has the label {labels[0]!r}; a classifier needs two or more"
        )
    dev = read_labeled(spec.dev_file, train.text_columns, train.label_column, spec.file_format, labels)
    return Examples(train, dev, labels)


class ClassifyTask:
    """Cross-entropy of the gold label, ``batch_size`` examples a batch; on the dev file, the loss,
    accuracy and macro-F1 (``valid_loss``, ``valid_accuracy``, ``valid_macro_f1``, named as every
    task names its held-out metrics)."""

    batch_flag = "--batch-size"  # what to lower when a step runs out of memory

    def __init__(self, run: RunConfig, tokenizer: WordPieceTokenizer, data: Examples) -> None:
        self.pad_id = tokenizer.pad_id
        index = {label: i for i, label in enumerate(data.labels)}
        self.batches = self._batches(
            tokenizer, data.train.examples, index, run.train.batch_size, run.train.seed
        )
        self.dev = self._batches(tokenizer, data.dev.examples, index, run.train.batch_size, run.train.seed)

    def _batches(
        self,
        tokenizer: WordPieceTokenizer,
        examples: Sequence[Example],
        index: dict[str, int],
        batch_size: int,
        seed: int,
    ) -> list[TextBatch]:
        encoded = encode_texts(tokenizer, [e.texts for e in examples])
        labels = [index[e.label] for e in examples]
        return [
            text_batch([encoded[i] for i in group], self.pad_id, [labels[i] for i in group])
            for group in length_batches([len(ids) for ids, _ in encoded], batch_size, seed)
        ]

    def train_batches(self) -> list[TextBatch]:
        return self.batches

    def loss(self, model: nn.Module, batch: TextBatch) -> tuple[Tensor, int]:
        assert batch.labels is not None
        logits = model(batch.tokens, batch.segments, batch.mask)
        return F.cross_entropy(logits.float(), batch.labels, reduction="sum"), len(batch.labels)

    def batch_tokens(self, batch: TextBatch) -> int:
        return int(batch.mask.sum())

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return classification_metrics(model, self.dev)


@torch.no_grad()
def classification_metrics(model: nn.Module, batches: Sequence[TextBatch]) -> dict[str, float]:
    """Mean cross-entropy, accuracy and macro-F1 of ``model`` on labeled ``batches`` (run on the
    model's device)."""
    total, predicted, gold = 0.0, [], []
    for batch in batches:
        assert batch.labels is not None
        on = on_model_device(model, batch)
        logits = model(on.tokens, on.segments, on.mask).float()
        total += float(F.cross_entropy(logits, on.labels, reduction="sum"))
        predicted.append(logits.argmax(dim=-1).cpu())
        gold.append(batch.labels)
    accuracy, macro_f1 = accuracy_and_macro_f1(torch.cat(predicted), torch.cat(gold))
    count = sum(len(labels) for labels in gold)
    return {"valid_loss": total / count, "valid_accuracy": accuracy, "valid_macro_f1": macro_f1}


def classifier_config(base: ModelConfig, pool: str) -> ModelConfig:
    """``base`` with a pooler exactly when the classifier reads the pooled [CLS] state."""
    return base.replace(pooler=pool == "cls")


class TextClassifier:
    """A fine-tuned classifier with its tokenizer and labels:
    ``TextClassifier.load(run_dir).predict([("a text",)])``."""

    def __init__(self, model: BertClassifier, tokenizer: WordPieceTokenizer, data: LabeledData) -> None:
        if data.labels is None:
            raise ConfigError("config field 'data.labels': a classifier run needs its label set")
        self.model, self.tokenizer, self.data = model, tokenizer, data
        self.labels: tuple[str, ...] = data.labels
        self.n_texts = len(data.text_columns or ("text",))

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> TextClassifier:
        """The classifier of a ``classify`` run on ``device`` (auto, cpu, cuda, cuda:N, mps; the
        weights read on the CPU, then moved)."""
        where = resolve_device(device)
        run, tokenizer = read_bert_run(Path(run_dir), {TASK: LabeledData}, "classification")
        model = RunDir(run_dir).load_weights(model_of(run)).to(where)
        return cls(model.eval(), tokenizer, run.data)

    def probabilities(self, texts: Sequence[tuple[str, ...]], batch_size: int = 64) -> Tensor:
        """p(y | x) (n, n_classes) of each text (a 1-tuple) or sentence pair (a 2-tuple), cut to
        the model's max_len, computed on the model's device and returned on the CPU; no texts
        give a (0, n_classes) tensor."""
        self.model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = text_batch(
                    encode_texts(self.tokenizer, texts[start : start + batch_size]), self.tokenizer.pad_id
                )
                batch = on_model_device(self.model, batch)
                logits = self.model(batch.tokens, batch.segments, batch.mask)
                out.append(logits.float().softmax(dim=-1).cpu())
        return torch.cat(out) if out else torch.empty(0, len(self.labels))

    def predict(self, texts: Sequence[tuple[str, ...]], batch_size: int = 64) -> list[tuple[str, float]]:
        """The most likely label of each text or pair, and its probability (``[]`` for no texts)."""
        probs, best = self.probabilities(texts, batch_size).max(dim=-1)
        return [(self.labels[i], p) for i, p in zip(best.tolist(), probs.tolist(), strict=True)]

    def evaluate(self, labeled: LabeledFile, batch_size: int = 64) -> dict[str, float]:
        """Loss, accuracy and macro-F1 on the examples of ``labeled`` (read with this run's labels)."""
        index = {label: i for i, label in enumerate(self.labels)}
        encoded = encode_texts(self.tokenizer, [e.texts for e in labeled.examples])
        labels = [index[e.label] for e in labeled.examples]
        batches = [
            text_batch(encoded[i : i + batch_size], self.tokenizer.pad_id, labels[i : i + batch_size])
            for i in range(0, len(encoded), batch_size)
        ]
        self.model.eval()
        return classification_metrics(self.model, batches)


def model_of(run: RunConfig) -> BertClassifier:
    """The (untrained) model of a ``classify`` run."""
    if run.data.labels is None:
        raise ConfigError("config field 'data.labels': a classifier run needs its label set")
    return BertClassifier(run.model, len(run.data.labels), run.data.pool)


def train_classify(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False, data: Examples | None = None
) -> tuple[dict[str, Any], TextClassifier]:
    """Fine-tune (or, with ``resume``, continue) a classifier in ``run_dir``; return the metrics and
    the classifier. ``data``: the examples, when already read (else from ``run.data``). A new run
    takes its encoder, tokenizer and model config (all but ``dropout``) from the run
    ``run.data.init``, or trains a WordPiece tokenizer on the training texts; ``config.json``
    records the label set and the columns read."""
    data = data or load_labeled(run.data)
    bert, rows = None, None
    if resume:
        tokenizer = WordPieceTokenizer.load(run_dir / TOKENIZER, run.model.max_len)
    elif run.data.init is not None:
        init, bert, tokenizer = pretrained_bert(Path(run.data.init))
        run = RunConfig(run.task, init.model.replace(dropout=run.model.dropout), run.train, run.data)
    else:
        texts = [t for e in data.train.examples for t in e.texts]
        run, tokenizer, rows = scratch_encoder(run, texts, quiet)
    if not resume:
        spec = run.data.replace(
            labels=data.labels, text_columns=data.train.text_columns, label_column=data.train.label_column
        )
        run = RunConfig(run.task, classifier_config(run.model, spec.pool), run.train, spec)
    check_tokenizer(run, tokenizer, run_dir)
    task = ClassifyTask(run, tokenizer, data)

    build = encoder_builder(lambda: model_of(run), bert, rows, run.data.freeze_embeddings)
    metrics, model = fit_run(run, run_dir, task, build, lambda d: save_tokenizer(tokenizer, d), resume, quiet)
    return metrics, TextClassifier(model.eval(), tokenizer, run.data)


def evaluate_run(run_dir: Path, request: Evaluation) -> list[str]:
    """Loss, accuracy and macro-F1 of a ``classify`` run on ``request.labeled``."""
    if request.labeled is None:
        raise ConfigError("a classifier is evaluated with --labeled FILE (TSV, CSV or JSON lines)")
    classifier = TextClassifier.load(run_dir, request.device)
    spec = classifier.data
    file_format = request.file_format or spec.file_format
    labeled = read_labeled(
        request.labeled, spec.text_columns, spec.label_column, file_format, classifier.labels
    )
    metrics = classifier.evaluate(labeled, request.batch_size)
    return [
        f"accuracy {metrics['valid_accuracy']:.1%}  macro-F1 {metrics['valid_macro_f1']:.3f}  "
        f"loss {metrics['valid_loss']:.4f}  ({len(labeled.examples)} examples)"
    ]


def recipe(flags: Sections) -> str:
    """BERT's fine-tuning recipe, from scratch or (``--init``) at the pretrained learning rate."""
    return init_recipe(TASK, flags)


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """A classifier run: the files and ``--init`` stored absolute, the model of an ``--init`` run
    fixed (but its dropout), and the steps, warmup (10%) and evaluation interval (once an epoch)
    taken from the epochs where they are not given, which reads the training file to count its
    examples."""
    needs = "train classify needs --train and --dev files"
    fine_tuning_rules(sections, flags, source, recipe(flags), needs, "examples")
    train = sections.setdefault("train", {})
    spec = LabeledData.from_dict(sections["data"], source=source)
    checked = TrainConfig.from_dict(train, source=source)  # --epochs and --batch-size, before reading
    if checked.epochs is not None:
        examples = load_labeled(spec)
        sections["train"] = epoch_settings(
            train, len(examples.train.examples), checked.batch_size, checked.epochs
        )
    return validated(TASK, sections, LabeledData, source)


def finish(
    result: tuple[dict[str, Any], TextClassifier], run_dir: Path, started: float, quiet: bool
) -> list[str]:
    """The report after training: the dev scores."""
    metrics, _ = result
    return [
        f"\ndev accuracy {metrics['valid_accuracy']:.1%}  macro-F1 {metrics['valid_macro_f1']:.3f}  "
        f"loss {metrics['valid_loss']:.3f}  ({metrics['steps']} steps, "
        f"{metrics['tokens_per_second']:,.0f} tokens/s, total {time.perf_counter() - started:.0f} s)",
        f'\nrun directory: {run_dir}\n  vaswani classify {run_dir} "a text to label"',
    ]
