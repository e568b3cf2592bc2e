"""A ``tag`` run in use: a BERT token tagger's reading of words (the first piece of each word
carries its tag), its batches, and :class:`Tagger`, which tags sentences and scores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig
from vaswani.data.batching import length_batches, pad
from vaswani.data.config import TagData
from vaswani.data.conll import Sentence
from vaswani.errors import ConfigError, DataError
from vaswani.metrics import TagScores, score_tags
from vaswani.models.tagger import BertTagger
from vaswani.pipelines.bert import read_bert_run
from vaswani.pipelines.common import on_model_device
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device
from vaswani.tokenizer import WordPieceTokenizer

TASK = "tag"


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
