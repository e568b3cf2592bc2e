"""Part-of-speech tagging: one tag per word, from a BERT encoder with a classifier on each token.

Sentences come from CoNLL-U files (Universal Dependencies): one word a line, ten tab-separated
fields, the word's FORM second and its universal part-of-speech tag (UPOS) fourth; a blank line
ends a sentence; comments (``#``), multi-word tokens (ID ``1-2``, whose words follow on their own
lines) and empty nodes (ID ``8.1``) are skipped. The tag set is the sorted set of the training
file's tags.

Each word is split into WordPiece pieces and a sentence reads as ``[CLS] pieces [SEP]``; the tag of
word w is predicted at its first piece f(w) (:class:`~vaswani.models.tagger.BertTagger`):

    p(t_w | x) = softmax(W_c · Dropout(h_f(w)) + b_c)

Training minimises Σ_w −log p(t_w | x) over the words (their first pieces only: the later
pieces, [CLS], [SEP] and padding are never scored), ``batch_size`` sentences a batch; the dev file
is scored by the accuracy over its words. A sentence of more pieces than fit the model
(``max_len`` − 2) is cut into consecutive spans of whole words that fit, each read alone (a word
longer than that keeps its first pieces: only the first is tagged). The encoder starts from a
pretrained run (``--init``: an ``mlm`` or ``encoder`` run's weights, tokenizer and model config)
or from scratch, with a WordPiece tokenizer trained on the training sentences.
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

from vaswani.config import RunConfig, TrainConfig
from vaswani.data.batching import pad
from vaswani.data.config import EncoderData
from vaswani.data.readers import read_lines
from vaswani.errors import ConfigError, DataError
from vaswani.models.tagger import BertTagger
from vaswani.recipes import Sections
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device
from vaswani.schema import flag, no_flag
from vaswani.tasks.bert import TOKENIZER, check_tokenizer, read_bert_run, save_tokenizer
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

TASK = "tag"


@dataclass(frozen=True)
class TagData(EncoderData):
    """CoNLL-U sentences for a tagger: ``train_file`` and ``dev_file``; ``tags`` is the tag set of
    the training file (sorted), the classes in order. The encoder starts from the run ``init``
    (null: from scratch, with a WordPiece or word-level vocabulary of ``vocab_size``: see
    :class:`~vaswani.data.config.EncoderData`)."""

    train_file: str | None = flag(None, "CoNLL-U training sentences (their UPOS tags)", flag="--train")
    dev_file: str | None = flag(None, "CoNLL-U sentences to score on", flag="--dev")
    tags: tuple[str, ...] | None = no_flag(None)
    vocab_size: int = flag(8000, "WordPiece vocabulary size from scratch (default 8000)", range="(0, inf)")

    def _check(self) -> None:
        super()._check()
        if self.tags is not None and (len(self.tags) < 2 or len(set(self.tags)) < len(self.tags)):
            self._fail("tags", f"two or more distinct tags, got {list(self.tags)}")
        if self.train_file is None or self.dev_file is None:
            self._fail("train_file", "a tagger needs 'train_file' and 'dev_file'")


@dataclass(frozen=True)
class Sentence:
    """The words of one sentence, their tags and the line number of each word in its file."""

    words: tuple[str, ...]
    tags: tuple[str, ...]
    lines: tuple[int, ...]


def read_conllu(path: str | Path) -> list[Sentence]:
    """The sentences of a CoNLL-U file (FORM and UPOS of each word). A line that is not ten
    tab-separated fields, a word ID out of order (a missing blank line between sentences), or a
    word without a FORM or UPOS (``_``) is a one-line :class:`DataError` naming file and line."""
    sentences: list[Sentence] = []
    words: list[tuple[str, str, int]] = []
    for number, line in enumerate([*read_lines(path, allow_empty_lines=True), ""], start=1):
        if not line.strip():
            if words:
                sentences.append(Sentence(*(tuple(column) for column in zip(*words, strict=True))))
            words = []
            continue
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise DataError(f"{path}:{number}: {len(fields)} tab-separated field(s), CoNLL-U has 10")
        ident, form, upos = fields[0], fields[1], fields[3]
        if "-" in ident or "." in ident:  # a multi-word token or an empty node
            continue
        if ident != str(len(words) + 1):
            raise DataError(
                f"{path}:{number}: word ID {ident!r} where {len(words) + 1} was expected "
                "(is a blank line missing between two sentences?)"
            )
        if not form or not upos or upos == "_":
            raise DataError(f"{path}:{number}: word {ident} has no {'FORM' if not form else 'UPOS tag'}")
        words.append((form, upos, number))
    if not sentences:
        raise DataError(f"{path}: no sentences (expected CoNLL-U: one word a line, a blank line after each)")
    return sentences


@dataclass(frozen=True)
class Span:
    """Consecutive words ``start``, ``start + 1``... of sentence ``sentence`` as one row: the ids
    of ``[CLS] pieces [SEP]`` and the position of each word's first piece."""

    sentence: int
    start: int
    ids: list[int]
    first: list[int]


def encode_words(tokenizer: WordPieceTokenizer, sentences: Sequence[Sequence[str]]) -> list[Span]:
    """The rows of ``sentences`` (lists of words), in order: one span per sentence, or several for
    one of more pieces than fit between [CLS] and [SEP] (``tokenizer.max_len`` − 2), each holding
    whole words. A word with no piece (only characters the normaliser removes) reads as [UNK]."""
    room = tokenizer.max_len - 2
    flat = [word for words in sentences for word in words]
    pieces = iter(tokenizer.encode_pieces_batch(flat) if flat else [])
    spans: list[Span] = []
    for index, words in enumerate(sentences):
        start, ids, first = 0, [tokenizer.cls_id], []
        for position in range(len(words)):
            word = (next(pieces) or [tokenizer.unk_id])[:room]
            if first and len(ids) - 1 + len(word) > room:
                spans.append(Span(index, start, [*ids, tokenizer.sep_id], first))
                start, ids, first = position, [tokenizer.cls_id], []
            first.append(len(ids))
            ids.extend(word)
        spans.append(Span(index, start, [*ids, tokenizer.sep_id], first))
    return spans


@dataclass
class TagBatch:
    """Padded rows: ``tokens`` and ``mask`` (True at real tokens), ``first`` (True at each word's
    first piece), all (batch, seq); ``tags`` (n,): the gold tag ids of those n words in
    row-major order, when known."""

    tokens: Tensor
    mask: Tensor
    first: Tensor
    tags: Tensor | None = None


def tag_batch(spans: Sequence[Span], pad_id: int, tags: Sequence[int] | None = None) -> TagBatch:
    tokens = pad([span.ids for span in spans], pad_id)
    first = torch.zeros_like(tokens, dtype=torch.bool)
    for row, span in enumerate(spans):
        first[row, span.first] = True
    return TagBatch(tokens, tokens != pad_id, first, None if tags is None else torch.tensor(list(tags)))


def gold_batches(
    tokenizer: WordPieceTokenizer, sentences: Sequence[Sentence], index: dict[str, int], batch_size: int,
    seed: int, where: str | Path,
) -> list[TagBatch]:  # fmt: skip
    """Batches of ``batch_size`` spans of similar length with their gold tag ids; a tag outside
    ``index`` (the run's tag set) is a :class:`DataError` naming ``where`` and the line."""
    for sentence in sentences:
        for tag, line in zip(sentence.tags, sentence.lines, strict=True):
            if tag not in index:
                raise DataError(f"{where}:{line}: tag {tag!r} is not in the run's tag set")
    spans = encode_words(tokenizer, [s.words for s in sentences])
    tags = [[index[t] for t in sentences[s.sentence].tags[s.start : s.start + len(s.first)]] for s in spans]
    return [
        tag_batch([spans[i] for i in group], tokenizer.pad_id, [t for i in group for t in tags[i]])
        for group in length_batches([len(s.ids) for s in spans], batch_size, seed)
    ]


def tagging_loss(model: nn.Module, batch: TagBatch) -> tuple[Tensor, int]:
    """Σ_w −log p(t_w | x) over the words of ``batch`` (read at their first pieces), and their count."""
    assert batch.tags is not None
    logits = model(batch.tokens, batch.mask, batch.first)
    return F.cross_entropy(logits.float(), batch.tags, reduction="sum"), len(batch.tags)


@torch.no_grad()
def tagging_metrics(model: nn.Module, batches: Sequence[TagBatch]) -> dict[str, float]:
    """Mean cross-entropy and accuracy over the words of labeled ``batches`` (run on the model's
    device)."""
    total, correct, count = 0.0, 0, 0
    for batch in (on_model_device(model, b) for b in batches):
        assert batch.tags is not None
        logits = model(batch.tokens, batch.mask, batch.first).float()
        total += float(F.cross_entropy(logits, batch.tags, reduction="sum"))
        correct += int((logits.argmax(dim=-1) == batch.tags).sum())
        count += len(batch.tags)
    return {"valid_loss": total / max(1, count), "valid_accuracy": correct / max(1, count)}


class TagTask:
    """The trainer's task: :func:`tagging_loss` on batches of ``batch_size`` spans; on the dev
    file, the loss and accuracy (``valid_loss``, ``valid_accuracy``)."""

    batch_flag = "--batch-size"  # what to lower when a step runs out of memory

    def __init__(
        self, run: RunConfig, tokenizer: WordPieceTokenizer, train: list[Sentence], dev: list[Sentence]
    ):
        index = {tag: i for i, tag in enumerate(run.data.tags)}
        size, seed = run.train.batch_size, run.train.seed
        self.batches = gold_batches(tokenizer, train, index, size, seed, run.data.train_file)
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
        return tagging_metrics(model, self.dev)


class Tagger:
    """A trained tagger with its tokenizer and tag set:
    ``Tagger.load(run_dir).tag([["The", "cat", "sat", "."]])``."""

    def __init__(self, model: BertTagger, tokenizer: WordPieceTokenizer, tags: tuple[str, ...]) -> None:
        self.model, self.tokenizer, self.tags = model, tokenizer, tags

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> Tagger:
        """The tagger of a ``tag`` run on ``device`` (auto, cpu, cuda, cuda:N, mps; the weights
        read on the CPU, then moved)."""
        where = resolve_device(device)
        run, tokenizer = read_bert_run(Path(run_dir), {TASK: TagData}, "tagging")
        model = RunDir(run_dir).load_weights(model_of(run)).to(where)
        return cls(model.eval(), tokenizer, run.data.tags)

    @torch.no_grad()
    def tag(self, sentences: Sequence[Sequence[str]], batch_size: int = 64) -> list[list[str]]:
        """The tag of each word of each sentence (a list of words); ``[]`` for no sentences."""
        self.model.eval()
        out: list[list[str]] = [[] for _ in sentences]
        spans = encode_words(self.tokenizer, sentences)
        for start in range(0, len(spans), batch_size):
            group = spans[start : start + batch_size]
            batch = on_model_device(self.model, tag_batch(group, self.tokenizer.pad_id))
            best = iter(self.model(batch.tokens, batch.mask, batch.first).argmax(dim=-1).tolist())
            for span in group:
                out[span.sentence].extend(self.tags[next(best)] for _ in span.first)
        return out

    def evaluate(
        self, sentences: list[Sentence], where: str | Path, batch_size: int = 64
    ) -> dict[str, float]:
        """Loss and accuracy on the words of ``sentences`` (read from ``where``), with this run's tags."""
        index = {tag: i for i, tag in enumerate(self.tags)}
        self.model.eval()
        batches = gold_batches(self.tokenizer, sentences, index, batch_size, 0, where)
        return tagging_metrics(self.model, batches)


def model_of(run: RunConfig) -> BertTagger:
    """The (untrained) model of a ``tag`` run."""
    if run.data.tags is None:
        raise ConfigError("config field 'data.tags': a tagger run needs its tag set")
    return BertTagger(run.model, len(run.data.tags))


def tag_set(sentences: Sequence[Sentence], path: str | Path) -> tuple[str, ...]:
    """The sorted tags of the training sentences (two or more)."""
    tags = tuple(sorted({tag for sentence in sentences for tag in sentence.tags}))
    if len(tags) < 2:
        raise DataError(f"{path}: every word has the tag {tags[0]!r}; a tagger needs two or more")
    return tags


def train_tag(
    run: RunConfig, run_dir: Path, resume: bool = False, quiet: bool = False
) -> tuple[dict[str, Any], Tagger]:
    """Train (or, with ``resume``, continue) a tagger in ``run_dir``; return the metrics and the
    tagger. A new run takes its encoder, tokenizer and model config (all but ``dropout``; no
    pooler) from the run ``run.data.init``, or trains a WordPiece tokenizer on the training
    sentences; ``config.json`` records the tag set."""
    train, dev = read_conllu(run.data.train_file), read_conllu(run.data.dev_file)
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
        tags = tag_set(train, run.data.train_file)
        run = RunConfig(run.task, run.model, run.train, run.data.replace(tags=tags))
    check_tokenizer(run, tokenizer, run_dir)
    task = TagTask(run, tokenizer, train, dev)

    build = encoder_builder(lambda: model_of(run), bert, rows, run.data.freeze_embeddings)
    metrics, model = fit_run(run, run_dir, task, build, lambda d: save_tokenizer(tokenizer, d), resume, quiet)
    return metrics, Tagger(model.eval(), tokenizer, run.data.tags)


def evaluate_run(run_dir: Path, request: Evaluation) -> list[str]:
    """Loss and accuracy of a ``tag`` run on the CoNLL-U file ``request.labeled``."""
    if request.labeled is None:
        raise ConfigError("a tagger is evaluated with --labeled FILE (CoNLL-U)")
    if request.file_format is not None:
        raise ConfigError("--format: a tagger reads CoNLL-U files only")
    sentences = read_conllu(request.labeled)
    metrics = Tagger.load(run_dir, request.device).evaluate(sentences, request.labeled, request.batch_size)
    words = sum(len(s.words) for s in sentences)
    return [
        f"accuracy {metrics['valid_accuracy']:.1%}  loss {metrics['valid_loss']:.4f}  "
        f"({words} words, {len(sentences)} sentences)"
    ]


def recipe(flags: Sections) -> str:
    """The tagging recipe, from scratch or (``--init``) at the fine-tuning learning rate."""
    return init_recipe(TASK, flags)


def configure(sections: Sections, flags: Sections, source: str) -> RunConfig:
    """A tagger run: the files and ``--init`` stored absolute, the model of an ``--init`` run fixed
    (but its dropout), ``--layers`` the encoder's depth, and the steps, warmup (10%) and
    evaluation interval (once an epoch) taken from the epochs where they are not given, which
    reads the training file to count its sentences."""
    needs = "train tag needs --train and --dev files (CoNLL-U)"
    fine_tuning_rules(sections, flags, source, recipe(flags), needs, "sentences")
    train = sections.setdefault("train", {})
    spec = TagData.from_dict(sections["data"], source=source)
    checked = TrainConfig.from_dict(train, source=source)  # --epochs and --batch-size, before reading
    if checked.epochs is not None:
        n_sentences = len(read_conllu(spec.train_file))
        sections["train"] = epoch_settings(train, n_sentences, checked.batch_size, checked.epochs)
    return validated(TASK, sections, TagData, source)


def finish(result: tuple[dict[str, Any], Tagger], run_dir: Path, started: float, quiet: bool) -> list[str]:
    """The report after training: the dev scores."""
    metrics, _ = result
    return [
        f"\ndev accuracy {metrics['valid_accuracy']:.1%}  loss {metrics['valid_loss']:.3f}  "
        f"({metrics['steps']} steps, {metrics['tokens_per_second']:,.0f} tokens/s, "
        f"total {time.perf_counter() - started:.0f} s)",
        f"\nrun directory: {run_dir}\n  vaswani evaluate {run_dir} --labeled FILE.conllu",
    ]
