"""Token tagging (part of speech, named entities): one tag per word, from a BERT encoder with a
classifier on each token.

Sentences come from CoNLL-U files (Universal Dependencies: the UPOS field by default, ``--column``
for another) or column files (a word and its tag a line, CoNLL-2003 style), read by
:mod:`vaswani.data.conll`. The tag set is the sorted set of the training file's tags.

Each word is split into WordPiece pieces and a sentence reads as ``[CLS] pieces [SEP]``; the tag of
word w is predicted at its first piece f(w) (:class:`~vaswani.models.tagger.BertTagger`):

    p(t_w | x) = softmax(W_c · Dropout(h_f(w)) + b_c)

Training minimises Σ_w −log p(t_w | x) over the words (their first pieces only: the later
pieces, [CLS], [SEP] and padding are never scored), ``batch_size`` sentences a batch; the dev file
is scored by the accuracy over its words, the macro-F1 over its tags and, for BIO tags, the span F1
(:mod:`vaswani.tasks.tag_scores`). A sentence of more pieces than fit the model
(``max_len`` − 2) is cut into consecutive spans of whole words that fit, each read alone (a word
longer than that keeps its first pieces: only the first is tagged). The encoder starts from a
pretrained run (``--init``: an ``mlm`` or ``encoder`` run's weights, tokenizer and model config)
or from scratch, with a WordPiece tokenizer trained on the training sentences."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig, TrainConfig
from vaswani.data.config import TagData
from vaswani.data.conll import Sentence, read_tagged
from vaswani.data.hf_datasets import tagged_sentences, train_and_dev
from vaswani.errors import ConfigError, DataError
from vaswani.metrics import tag_report
from vaswani.pipelines.bert import TOKENIZER, check_tokenizer, save_tokenizer
from vaswani.pipelines.tag import (
    TASK,
    TagBatch,
    Tagger,
    gold_batches,
    model_of,
    tagging_scores,
)
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
from vaswani.tasks.settings import validated
from vaswani.tokenizer import WordPieceTokenizer
from vaswani.training.trainer import fit_run


def tagging_loss(model: nn.Module, batch: TagBatch) -> tuple[Tensor, int]:
    """Σ_w −log p(t_w | x) over the words of ``batch`` (read at their first pieces), and their count."""
    assert batch.tags is not None
    logits = model(batch.tokens, batch.mask, batch.first)
    return F.cross_entropy(logits.float(), batch.tags, reduction="sum"), len(batch.tags)


class TagTask:
    """The trainer's task: :func:`tagging_loss` on batches of ``batch_size`` spans; on the dev
    file, the macro-F1, the span F1 of BIO tags, the loss and the accuracy (``valid_macro_f1``,
    ``valid_span_f1``, ``valid_loss``, ``valid_accuracy``)."""

    batch_flag = "--batch-size"  # what to lower when a step runs out of memory

    def __init__(
        self, run: RunConfig, tokenizer: WordPieceTokenizer, train: list[Sentence], dev: list[Sentence]
    ):
        self.tags = run.data.tags
        index = {tag: i for i, tag in enumerate(self.tags)}
        size, seed = run.train.batch_size, run.train.seed
        self.batches = gold_batches(tokenizer, train, index, size, seed, run.data.train_file).batches
        self.dev = gold_batches(tokenizer, dev, index, size, seed, run.data.dev_file)

    def train_batches(self) -> list[TagBatch]:
        return self.batches

    def loss(self, model: nn.Module, batch: TagBatch) -> tuple[Tensor, int]:
        return tagging_loss(model, batch)

    def take_rows(self, batch: TagBatch, start: int, stop: int) -> TagBatch:
        """Rows ``start … stop - 1`` of a batch, with the gold tags of their words (those run over
        the words of all rows, in row-major order)."""
        words = batch.first.sum(dim=1).cumsum(0).tolist()
        begin, end = (words[start - 1] if start else 0), (words[stop - 1] if stop else 0)
        tags = None if batch.tags is None else batch.tags[begin:end]
        return TagBatch(batch.tokens[start:stop], batch.mask[start:stop], batch.first[start:stop], tags)

    def batch_tokens(self, batch: TagBatch) -> int:
        return int(batch.mask.sum())

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return tagging_scores(model, self.dev, self.tags).metrics()


def tag_set(sentences: Sequence[Sentence], path: str | Path) -> tuple[str, ...]:
    """The sorted tags of the training sentences (two or more)."""
    tags = tuple(sorted({tag for sentence in sentences for tag in sentence.tags}))
    if len(tags) < 2:
        raise DataError(f"{path}: every word has the tag {tags[0]!r}; a tagger needs two or more")
    return tags


def read_sentences(spec: TagData) -> tuple[list[Sentence], list[Sentence], str]:
    """The training and dev sentences of a tagger, from its files or the splits of its dataset
    (:mod:`vaswani.data.hf_datasets`), and the training data's name."""
    if spec.dataset is not None:
        (train, train_name), (dev, dev_name) = train_and_dev(spec.dataset, spec.split, spec.dev_split)
        return (
            tagged_sentences(train, train_name, spec.tokens_column, spec.tags_column),
            tagged_sentences(dev, dev_name, spec.tokens_column, spec.tags_column),
            train_name,
        )
    assert spec.train_file is not None and spec.dev_file is not None  # TagData checks it
    return read_tagged(spec.train_file, spec.column), read_tagged(spec.dev_file, spec.column), spec.train_file


def train_tag(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False, device: Resolved = None
) -> tuple[dict[str, Any], Tagger]:
    """Train (or, with ``resume``, continue) a tagger in ``run_dir``; return the metrics and the
    tagger. A new run takes its encoder, tokenizer and model config (all but ``dropout``; no
    pooler) from the run ``run.data.init``, or trains a WordPiece tokenizer on the training
    sentences; ``config.json`` records the tag set."""
    column = run.data.column
    train, dev, train_name = read_sentences(run.data)
    bert, rows = None, None
    if resume:
        tokenizer = WordPieceTokenizer.load(run_dir / TOKENIZER, run.model.max_len)
    elif run.data.init is not None:
        init, bert, tokenizer = pretrained_bert(Path(run.data.init))
        model = init.model.replace(dropout=run.model.dropout, pooler=False)
        run = RunConfig(run.task, model, run.train, run.data)
    else:
        texts = [" ".join(sentence.words) for sentence in train]
        run, tokenizer, rows = scratch_encoder(run, texts, quiet)
    if not resume:
        tags = tag_set(train, train_name)
        run = RunConfig(run.task, run.model, run.train, run.data.replace(tags=tags))
    check_tokenizer(run, tokenizer, run_dir)
    task = TagTask(run, tokenizer, train, dev)

    build = encoder_builder(lambda: model_of(run), bert, rows, run.data.freeze_embeddings)
    metrics, model = fit_run(
        run, run_dir, task, build, lambda d: save_tokenizer(tokenizer, d), resume, quiet, device=device
    )
    return metrics, Tagger(model.eval(), tokenizer, run.data.tags, column)


def evaluate_run(run_dir: Path, request: Evaluation) -> Report:
    """The scores of a ``tag`` run on the tagged file ``request.labeled`` (CoNLL-U or a column
    file, its tags in the run's column): accuracy, loss, macro-F1, span F1 (BIO tags) and the F1
    of each tag (:func:`vaswani.tasks.tag_scores.report`)."""
    if request.labeled is None:
        raise ConfigError("a tagger is evaluated with --labeled FILE (CoNLL-U or a word and its tag a line)")
    if request.file_format is not None:
        raise ConfigError("--format: a tagger reads CoNLL-U and column files only (told apart by the file)")
    tagger = Tagger.load(run_dir, request.device)
    sentences = read_tagged(request.labeled, tagger.column)
    scores = tagger.evaluate(sentences, request.labeled, request.batch_size)
    return Report(tag_report(scores, sum(len(s.words) for s in sentences), len(sentences)))


def recipe(flags: Sections) -> str:
    """The tagging recipe, from scratch or (``--init``) at the fine-tuning learning rate."""
    return init_recipe(TASK, flags)


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """A tagger run: the files and ``--init`` stored absolute, the model of an ``--init`` run fixed
    (but its dropout), ``--layers`` the encoder's depth, and the steps, warmup (10%) and
    evaluation interval (once an epoch) taken from the epochs where they are not given, which
    reads the training file to count its sentences."""
    needs = "train tag needs --train and --dev files (CoNLL-U, or a word and its tag a line)"
    fine_tuning_rules(sections, flags, source, recipe(flags), needs, "sentences")
    train = sections.setdefault("train", {})
    spec = TagData.from_dict(sections["data"], source=source)
    checked = TrainConfig.from_dict(train, source=source)  # --epochs and --batch-size, before reading
    if checked.epochs is not None:
        n_sentences = len(read_sentences(spec)[0])
        sections["train"] = epoch_settings(train, n_sentences, checked.batch_size, checked.epochs)
    return validated(TASK, sections, TagData, source)


def finish(result: tuple[dict[str, Any], Tagger], run_dir: Path, started: float, quiet: bool) -> list[str]:
    """The report after training: the dev scores (accuracy and loss, then macro-F1 and the span F1
    of BIO tags) and how to use the run."""
    metrics, _ = result
    named = (
        ("valid_macro_f1", "macro-F1"),
        ("valid_span_f1", "span F1"),
    )  # a run of an older vaswani lacks them
    f1 = "  ".join(f"{name} {metrics[key]:.3f}" for key, name in named if key in metrics)
    return [
        f"\ndev accuracy {metrics['valid_accuracy']:.1%}  loss {metrics['valid_loss']:.3f}  "
        f"({metrics['steps']} steps, {metrics['tokens_per_second']:,.0f} tokens/s, "
        f"total {time.perf_counter() - started:.0f} s)",
        *([f"dev {f1}"] if f1 else []),
        f"\nrun directory: {run_dir}\n  vaswani evaluate {run_dir} --labeled FILE.conllu\n"
        f'  vaswani tag {run_dir} "A sentence to tag ."',
    ]
