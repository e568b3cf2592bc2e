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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig, TrainConfig
from vaswani.data.batching import pad
from vaswani.data.config import EncoderData
from vaswani.data.conll import Sentence, column_problem, read_tagged
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
from vaswani.tasks.tag_scores import TagScores, report, score_tags
from vaswani.tokenizer import WordPieceTokenizer
from vaswani.training.trainer import fit_run

TASK = "tag"


@dataclass(frozen=True)
class TagData(EncoderData):
    """Tagged sentences for a tagger (CoNLL-U or column files, :mod:`vaswani.data.conll`):
    ``train_file`` and ``dev_file``, their tags in ``column`` (null: UPOS, or a column file's last
    field); ``tags`` is the tag set of the training file (sorted), the classes in order. The
    encoder starts from the run ``init`` (null: from scratch, with a WordPiece or word-level
    vocabulary of ``vocab_size``: see :class:`~vaswani.data.config.EncoderData`)."""

    train_file: str | None = flag(
        None, "training sentences: CoNLL-U, or a word and its tag a line (CoNLL-2003 style)", flag="--train"
    )
    dev_file: str | None = flag(None, "sentences to score on (the same format)", flag="--dev")
    column: str | None = flag(
        None, "the tags' column: a CoNLL-U field (UPOS, the default; XPOS, DEPREL...) or a column number "
        "from 1 (default for a column file: its last)", metavar="COLUMN",
    )  # fmt: skip
    tags: tuple[str, ...] | None = no_flag(None)
    vocab_size: int = flag(8000, "WordPiece vocabulary size from scratch (default 8000)", range="(0, inf)")

    def _check(self) -> None:
        super()._check()
        problem = None if self.column is None else column_problem(self.column)
        if problem is not None:
            self._fail("column", f"--column must be {problem}")
        if self.tags is not None and (len(self.tags) < 2 or len(set(self.tags)) < len(self.tags)):
            self._fail("tags", f"two or more distinct tags, got {list(self.tags)}")
        if self.train_file is None or self.dev_file is None:
            self._fail("train_file", "a tagger needs 'train_file' and 'dev_file'")


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


@dataclass
class GoldBatches:
    """Batches of labeled sentences; ``words``: the (sentence, word) of each word of each batch,
    in row-major order; ``sizes``: the number of words of each sentence."""

    batches: list[TagBatch]
    words: list[list[tuple[int, int]]]
    sizes: list[int]


def gold_batches(
    tokenizer: WordPieceTokenizer, sentences: Sequence[Sentence], index: dict[str, int], batch_size: int,
    seed: int, where: str | Path,
) -> GoldBatches:  # fmt: skip
    """Batches of ``batch_size`` spans of similar length with their gold tag ids; a tag outside
    ``index`` (the run's tag set) is a :class:`DataError` naming the tag, ``where`` and the line."""
    for sentence in sentences:
        for tag, line in zip(sentence.tags, sentence.lines, strict=True):
            if tag not in index:
                raise DataError(
                    f"{where}:{line}: tag {tag!r} is not in the run's tag set (training never saw it)"
                )
    spans = encode_words(tokenizer, [s.words for s in sentences])
    tags = [[index[t] for t in sentences[s.sentence].tags[s.start : s.start + len(s.first)]] for s in spans]
    gold = GoldBatches([], [], [len(s.words) for s in sentences])
    for group in length_batches([len(s.ids) for s in spans], batch_size, seed):
        gold.batches.append(
            tag_batch([spans[i] for i in group], tokenizer.pad_id, [t for i in group for t in tags[i]])
        )
        gold.words.append(
            [(spans[i].sentence, spans[i].start + k) for i in group for k in range(len(spans[i].first))]
        )
    return gold


def tagging_loss(model: nn.Module, batch: TagBatch) -> tuple[Tensor, int]:
    """Σ_w −log p(t_w | x) over the words of ``batch`` (read at their first pieces), and their count."""
    assert batch.tags is not None
    logits = model(batch.tokens, batch.mask, batch.first)
    return F.cross_entropy(logits.float(), batch.tags, reduction="sum"), len(batch.tags)


@torch.no_grad()
def tagging_scores(model: nn.Module, gold: GoldBatches, tags: Sequence[str]) -> TagScores:
    """The mean cross-entropy, accuracy, F1 of each tag, macro-F1 and (BIO tags) span F1 over the
    words of ``gold`` (run on the model's device; the spans of each sentence as a whole)."""
    total = 0.0
    truth, found = [[0] * n for n in gold.sizes], [[0] * n for n in gold.sizes]
    for batch, words in zip((on_model_device(model, b) for b in gold.batches), gold.words, strict=True):
        assert batch.tags is not None
        logits = model(batch.tokens, batch.mask, batch.first).float()
        total += float(F.cross_entropy(logits, batch.tags, reduction="sum"))
        pairs = zip(words, logits.argmax(dim=-1).tolist(), batch.tags.tolist(), strict=True)
        for (sentence, word), best, tag in pairs:
            found[sentence][word], truth[sentence][word] = best, tag
    return score_tags(tags, truth, found, total / max(1, sum(gold.sizes)))


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


class Tagger:
    """A trained tagger with its tokenizer and tag set:
    ``Tagger.load(run_dir).tag([["The", "cat", "sat", "."]])``."""

    def __init__(
        self,
        model: BertTagger,
        tokenizer: WordPieceTokenizer,
        tags: tuple[str, ...],
        column: str | None = None,
    ) -> None:
        self.model, self.tokenizer, self.tags, self.column = model, tokenizer, tags, column

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> Tagger:
        """The tagger of a ``tag`` run on ``device`` (auto, cpu, cuda, cuda:N, mps; the weights
        read on the CPU, then moved)."""
        where = resolve_device(device)
        run, tokenizer = read_bert_run(Path(run_dir), {TASK: TagData}, "tagging")
        model = RunDir(run_dir).load_weights(model_of(run)).to(where)
        return cls(model.eval(), tokenizer, run.data.tags, run.data.column)

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

    def evaluate(self, sentences: list[Sentence], where: str | Path, batch_size: int = 64) -> TagScores:
        """The scores on the words of ``sentences`` (read from ``where``), with this run's tags."""
        index = {tag: i for i, tag in enumerate(self.tags)}
        self.model.eval()
        gold = gold_batches(self.tokenizer, sentences, index, batch_size, 0, where)
        return tagging_scores(self.model, gold, self.tags)


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
    column = run.data.column
    train, dev = read_tagged(run.data.train_file, column), read_tagged(run.data.dev_file, column)
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
    return metrics, Tagger(model.eval(), tokenizer, run.data.tags, column)


def evaluate_run(run_dir: Path, request: Evaluation) -> list[str]:
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
    return report(scores, sum(len(s.words) for s in sentences), len(sentences))


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
        n_sentences = len(read_tagged(spec.train_file, spec.column))
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
