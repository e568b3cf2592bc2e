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

An ``lm`` run given as ``--init`` makes a GPT classifier instead (GPT-1's: the last real
token's state, an auxiliary language-modelling loss; :mod:`vaswani.tasks.gpt_classify`), chosen by
the init run's task and, afterwards, by the run's decoder-only model; it is used, evaluated and
resumed as a BERT classifier is.

Sentence embeddings of any BERT run are :mod:`vaswani.pipelines.encoder`'s.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.batching import length_batches
from vaswani.data.config import LabeledData
from vaswani.data.hf_datasets import labeled_examples, train_and_dev
from vaswani.data.labeled import Example, LabeledFile, read_labeled
from vaswani.errors import ConfigError, DataError
from vaswani.models.bert import BertClassifier
from vaswani.models.gpt_classifier import GPTClassifier
from vaswani.pipelines.bert import (
    TOKENIZER,
    TextBatch,
    TextReader,
    bert_reader,
    check_tokenizer,
    save_tokenizer,
)
from vaswani.pipelines.classify import (
    TASK,
    TextClassifier,
    classification_metrics,
    classifier_tokenizer,
    gpt_reader,
    model_of,
)
from vaswani.pipelines.lm import check_vocab
from vaswani.recipes import Sections
from vaswani.runtime import Resolved
from vaswani.tasks.evaluation import Evaluation, Report
from vaswani.tasks.finetune import (
    encoder_builder,
    epoch_settings,
    fine_tuning_rules,
    init_recipe,
    pretrained_bert,
    scratch_encoder,
)
from vaswani.tasks.gpt_classify import gpt_classifier_loss, gpt_rules, init_is_lm, pretrained_gpt, with_gpt
from vaswani.tasks.settings import validated
from vaswani.tokenizer import LMTokenizer, WordPieceTokenizer
from vaswani.training.trainer import fit_run


@dataclass
class Examples:
    """A classifier's training and dev examples and its label set (the classes, in order)."""

    train: LabeledFile
    dev: LabeledFile
    labels: tuple[str, ...]


Columns = Sequence[str] | None


def load_labeled(spec: LabeledData) -> Examples:
    """Read the training file (or split of ``spec.dataset``), take its sorted label set (or the
    run's, ``spec.labels``), and read the dev file (or split) with the same columns, refusing labels
    the training examples do not have."""
    if spec.dataset is not None:
        train_split, dev_split = train_and_dev(spec.dataset, spec.split, spec.dev_split)

        def read(dev: bool, columns: Columns, label: str | None, labels: Columns) -> LabeledFile:
            return labeled_examples(*(dev_split if dev else train_split), columns, label, labels)

        train_name = train_split[1]
    elif spec.train_file is None or spec.dev_file is None:
        raise ConfigError("config field 'data.train_file': a classifier needs --train and --dev files")
    else:
        files = spec.train_file, spec.dev_file

        def read(dev: bool, columns: Columns, label: str | None, labels: Columns) -> LabeledFile:
            return read_labeled(files[dev], columns, label, spec.file_format, labels)

        train_name = spec.train_file
    train = read(False, spec.text_columns, spec.label_column, spec.labels)
    labels = spec.labels or train.labels
    if len(labels) < 2:
        raise DataError(
            f"{train_name}: every example has the label {labels[0]!r}; a classifier needs two or more"
        )
    dev = read(True, train.text_columns, train.label_column, labels)
    return Examples(train, dev, labels)


class ClassifyTask:
    """Cross-entropy of the gold label (a GPT classifier's plus ``data.lm_weight`` times its
    language-modelling loss: :func:`~vaswani.tasks.gpt_classify.gpt_classifier_loss`),
    ``batch_size`` examples a batch, read by ``reader``; on the dev file, the loss, accuracy and
    macro-F1 (``valid_loss``, ``valid_accuracy``, ``valid_macro_f1``, named as every task names
    its held-out metrics). ``vocab_size``: the tokenizer's (a GPT's softmax runs over it)."""

    batch_flag = "--batch-size"  # what to lower when a step runs out of memory

    def __init__(self, run: RunConfig, reader: TextReader, data: Examples, vocab_size: int) -> None:
        self.gpt = run.model.arch == "decoder_only"
        self.lm_weight, self.vocab_size = run.data.lm_weight, vocab_size
        self.unused_parameters = self.gpt and self.lm_weight == 0  # an untied LM head is left out
        index = {label: i for i, label in enumerate(data.labels)}
        self.batches = self._batches(reader, data.train.examples, index, run.train.batch_size, run.train.seed)
        self.dev = self._batches(reader, data.dev.examples, index, run.train.batch_size, run.train.seed)

    @staticmethod
    def _batches(
        reader: TextReader, examples: Sequence[Example], index: dict[str, int], batch_size: int, seed: int
    ) -> list[TextBatch]:
        rows = reader.encode([e.texts for e in examples])
        labels = [index[e.label] for e in examples]
        return [
            reader.batch([rows[i] for i in group], [labels[i] for i in group])
            for group in length_batches([len(row[0]) for row in rows], batch_size, seed)
        ]

    def train_batches(self) -> list[TextBatch]:
        return self.batches

    def loss(self, model: nn.Module, batch: TextBatch) -> tuple[Tensor, int]:
        assert batch.labels is not None
        if self.gpt:
            return gpt_classifier_loss(model, batch, self.lm_weight, self.vocab_size), len(batch.labels)
        logits = model(batch.tokens, batch.segments, batch.mask)
        return F.cross_entropy(logits.float(), batch.labels, reduction="sum"), len(batch.labels)

    def batch_tokens(self, batch: TextBatch) -> int:
        return int(batch.mask.sum())

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return classification_metrics(model, self.dev)


def classifier_config(base: ModelConfig, pool: str) -> ModelConfig:
    """``base`` with a pooler exactly when the classifier reads the pooled [CLS] state."""
    return base.replace(pooler=pool == "cls")


def train_classify(
    run: RunConfig,
    run_dir: Path,
    resume: bool = False,
    quiet: bool = False,
    device: Resolved = None,
    data: Examples | None = None,
) -> tuple[dict[str, Any], TextClassifier]:
    """Fine-tune (or, with ``resume``, continue) a classifier in ``run_dir``; return the metrics and
    the classifier. ``data``: the examples, when already read (else from ``run.data``). A new run
    takes its encoder, tokenizer and model config (all but ``dropout``) from the run
    ``run.data.init`` (a BERT, or a GPT from an ``lm`` run), or trains a WordPiece tokenizer on
    the training texts; ``config.json`` records the label set and the columns read."""
    data = data or load_labeled(run.data)
    bert, gpt, rows = None, None, None
    tokenizer: WordPieceTokenizer | LMTokenizer
    if resume and run.model.arch == "decoder_only":
        tokenizer = classifier_tokenizer(run_dir, run)
    elif resume:
        tokenizer = WordPieceTokenizer.load(run_dir / TOKENIZER, run.model.max_len)
    elif run.data.init is not None and init_is_lm(run.data.init):
        init, gpt, tokenizer = pretrained_gpt(Path(run.data.init))
        spec = run.data.replace(eos_token=init.data.eos_token, bos_token=init.data.bos_token)
        run = RunConfig(run.task, init.model.replace(dropout=run.model.dropout), run.train, spec)
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
    if isinstance(tokenizer, LMTokenizer):
        check_vocab(run, tokenizer, run_dir)

        def build() -> nn.Module:
            model = model_of(run)
            assert isinstance(model, GPTClassifier)
            return with_gpt(model, gpt)

        reader = gpt_reader(tokenizer, run.model.max_len)
    else:
        check_tokenizer(run, tokenizer, run_dir)
        build = encoder_builder(lambda: model_of(run), bert, rows, run.data.freeze_embeddings)
        reader = bert_reader(tokenizer)

    def save(folder: Path) -> None:
        if isinstance(tokenizer, LMTokenizer):
            tokenizer.save(folder / TOKENIZER)
        else:
            save_tokenizer(tokenizer, folder)

    task = ClassifyTask(run, reader, data, tokenizer.vocab_size)
    metrics, model = fit_run(run, run_dir, task, build, save, resume, quiet, device=device)
    assert isinstance(model, (BertClassifier, GPTClassifier))
    return metrics, TextClassifier(model.eval(), tokenizer, run.data)


def evaluate_run(run_dir: Path, request: Evaluation) -> Report:
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
    return Report(
        [
            f"accuracy {metrics['valid_accuracy']:.1%}  macro-F1 {metrics['valid_macro_f1']:.3f}  "
            f"loss {metrics['valid_loss']:.4f}  ({len(labeled.examples)} examples)"
        ]
    )


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
    gpt_rules(sections["data"], flags.get("data", {}))
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
