"""Evaluation metrics: BLEU and chrF through sacrebleu, on detokenised text; perplexity; accuracy,
F1 of each class and macro-F1 of class ids; spans of BIO tags and their F1 (seqeval's); a tagger's
scores (:class:`TagScores`: accuracy over the words, F1 of each tag, macro-F1 over the tags that
occur in the gold or predicted tags, and, for BIO tag sets, the span F1; :func:`tag_report`, the
lines ``vaswani evaluate`` prints)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sacrebleu
import torch
from torch import Tensor


@dataclass(frozen=True)
class Score:
    value: float
    signature: str


def bleu(
    hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a", lowercase: bool = False
) -> Score:
    """Corpus BLEU (Papineni et al. 2002) as sacrebleu computes it; use ``tokenize="zh"``
    for Chinese targets, ``lowercase=True`` for the case-insensitive figure many papers and
    tutorials report. The signature says exactly how it was computed."""
    metric = sacrebleu.BLEU(tokenize=tokenize, lowercase=lowercase)
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score(result.score, str(metric.get_signature()))


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> Score:
    """Character n-gram F-score (Popović 2015), sacrebleu's chrF."""
    metric = sacrebleu.CHRF()
    result = metric.corpus_score(list(hypotheses), [list(references)])
    return Score(result.score, str(metric.get_signature()))


def sentence_scores(
    hypotheses: Sequence[str], references: Sequence[str], metric: str, tokenize: str = "13a"
) -> list[float]:
    """Each hypothesis's sentence-level ``metric`` against its reference, in [0, 100]: ``bleu``,
    sacrebleu's sentence BLEU (exponential smoothing, effective order), or ``chrf``."""
    scorer = sacrebleu.BLEU(tokenize=tokenize, effective_order=True) if metric == "bleu" else sacrebleu.CHRF()
    return [scorer.sentence_score(h, [r]).score for h, r in zip(hypotheses, references, strict=True)]


def perplexity(mean_nll: float) -> float:
    """exp of the mean negative log-likelihood per token."""
    return math.exp(min(mean_nll, 700.0))


def class_f1(predicted: Tensor, gold: Tensor) -> dict[int, float]:
    """The F1 of each class id that occurs in ``predicted`` or ``gold`` (n,):
    2 TP_c / (|predicted c| + |gold c|), by class id."""
    classes = torch.unique(torch.cat([predicted, gold]))
    return {
        int(c): 2.0
        * float(((predicted == c) & (gold == c)).sum())
        / float((predicted == c).sum() + (gold == c).sum())
        for c in classes
    }


def accuracy_and_macro_f1(predicted: Tensor, gold: Tensor) -> tuple[float, float]:
    """Accuracy and macro-F1 (the mean of :func:`class_f1` over the classes that occur in either)
    of class ids (n,)."""
    f1 = list(class_f1(predicted, gold).values())
    return float((predicted == gold).float().mean()), sum(f1) / len(f1)


BIO_TAG = re.compile(r"O|[BI]-.+")


def is_bio(tags: Iterable[str]) -> bool:
    """Whether ``tags`` are span labels in BIO form (IOB2, or IOB1): each ``O``, ``B-TYPE`` or
    ``I-TYPE``, and one at least not ``O``."""
    tags = list(tags)
    return all(BIO_TAG.fullmatch(tag) for tag in tags) and any(tag != "O" for tag in tags)


def bio_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The spans ``(type, first, last)`` (word indices, inclusive) of one sentence's BIO tags, as
    seqeval's default mode reads them: ``B-X`` starts a span; ``I-X`` continues the span of type X
    before it and otherwise starts one (after ``O``, at the start, or after another type), so that
    IOB1 reads right too; ``O`` ends a span."""
    spans: list[tuple[str, int, int]] = []
    start, kind = -1, ""
    for i, tag in enumerate([*tags, "O"]):
        prefix, name = tag[0], tag[2:]
        if start >= 0 and (prefix != "I" or name != kind):
            spans.append((kind, start, i - 1))
            start = -1
        if prefix == "B" or (prefix == "I" and start < 0):
            start, kind = i, name
    return spans


def span_f1(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
) -> tuple[float, float, float, int, int]:
    """Precision, recall and F1 of the predicted spans (:func:`bio_spans`) of each sentence
    against the gold ones, a span counting when its type, first and last word match exactly
    (seqeval's micro average; 0 where nothing is predicted or gold), and the numbers of gold and
    predicted spans."""
    true = {(n, *span) for n, tags in enumerate(gold) for span in bio_spans(tags)}
    found = {(n, *span) for n, tags in enumerate(predicted) for span in bio_spans(tags)}
    hits = len(true & found)
    precision = hits / len(found) if found else 0.0
    recall = hits / len(true) if true else 0.0
    f1 = 2 * hits / (len(true) + len(found)) if hits else 0.0
    return precision, recall, f1, len(true), len(found)


def is_cjk(text: str) -> bool:
    """Whether most letters of ``text`` are CJK ideographs (then BLEU needs ``tokenize="zh"``)."""
    letters = [c for c in text if c.isalpha()]
    cjk = sum(1 for c in letters if "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf")
    return bool(letters) and cjk / len(letters) > 0.5


def translation_scores(hypotheses: Sequence[str], references: Sequence[str], tokenize: str) -> dict[str, Any]:
    """BLEU (cased and lowercased, sacreBLEU's ``tokenize``) and chrF of ``hypotheses`` against
    ``references``, with their signatures and the hypotheses: what ``evaluate`` reports for a
    translator."""
    b, c = bleu(hypotheses, references, tokenize), chrf(hypotheses, references)
    lower = bleu(hypotheses, references, tokenize, lowercase=True)
    return {
        "bleu": b.value,
        "bleu_lowercase": lower.value,
        "chrf": c.value,
        "bleu_signature": b.signature,
        "bleu_lowercase_signature": lower.signature,
        "chrf_signature": c.signature,
        "hypotheses": list(hypotheses),
    }


@dataclass(frozen=True)
class TagScores:
    """``loss`` (the mean cross-entropy a word), ``accuracy``, ``macro_f1``; ``per_tag``: each
    tag that occurs in the gold or the predicted tags → (its F1, gold count, predicted count);
    ``spans``: precision, recall, F1, gold and predicted counts of the spans (BIO tags; else None)."""

    loss: float
    accuracy: float
    macro_f1: float
    per_tag: dict[str, tuple[float, int, int]]
    spans: tuple[float, float, float, int, int] | None

    def metrics(self) -> dict[str, float]:
        """The trainer's validation metrics: ``valid_macro_f1``, ``valid_span_f1`` (BIO tags),
        then ``valid_loss`` and ``valid_accuracy`` (the last columns of the log, as before the
        F1 columns were added)."""
        spans = {} if self.spans is None else {"valid_span_f1": self.spans[2]}
        return {
            "valid_macro_f1": self.macro_f1,
            **spans,
            "valid_loss": self.loss,
            "valid_accuracy": self.accuracy,
        }


def score_tags(
    tags: Sequence[str], gold: Sequence[Sequence[int]], predicted: Sequence[Sequence[int]], loss: float
) -> TagScores:
    """The scores of the ``predicted`` tag ids of each sentence against the ``gold`` ones (ids into
    ``tags``, one list per sentence, at least one word in all), with the mean ``loss``."""
    truth = torch.tensor([t for sentence in gold for t in sentence])
    found = torch.tensor([t for sentence in predicted for t in sentence])
    accuracy, macro_f1 = accuracy_and_macro_f1(found, truth)
    gold_counts, found_counts = Counter(truth.tolist()), Counter(found.tolist())
    per_tag = {tags[c]: (f1, gold_counts[c], found_counts[c]) for c, f1 in class_f1(found, truth).items()}
    spans = None
    if is_bio(tags):
        spans = span_f1([[tags[t] for t in s] for s in gold], [[tags[t] for t in s] for s in predicted])
    return TagScores(loss, accuracy, macro_f1, per_tag, spans)


def tag_report(scores: TagScores, words: int, sentences: int) -> list[str]:
    """What ``vaswani evaluate`` prints of a tagger's scores on ``words`` words of ``sentences``
    sentences: the accuracy and loss, the macro-F1, the span F1 (BIO tags) and a table of the
    F1 of each tag."""
    lines = [
        f"accuracy {scores.accuracy:.1%}  loss {scores.loss:.4f}  ({words} words, {sentences} sentences)",
        f"macro-F1 {scores.macro_f1:.3f} (the mean F1 of {len(scores.per_tag)} tags)",
    ]
    if scores.spans is not None:
        precision, recall, f1, n_gold, n_found = scores.spans
        lines.append(
            f"span F1 {f1:.3f}  precision {precision:.3f}  recall {recall:.3f}  "
            f"({n_gold} gold spans, {n_found} predicted; exact type and boundaries, as seqeval)"
        )
    width = max(3, *(len(tag) for tag in scores.per_tag))
    lines.append(f"{'tag':<{width}}  {'F1':>6}  {'gold':>7}  {'predicted':>9}")
    for tag, (f1, n_gold, n_found) in sorted(scores.per_tag.items()):
        lines.append(f"{tag:<{width}}  {f1:6.3f}  {n_gold:7d}  {n_found:9d}")
    return lines
