"""How well a tagger's tags match the gold ones: the accuracy over the words, the F1 of each tag
and their mean (macro-F1, over the tags that occur in the gold or the predicted tags), and, when
the tag set is BIO span labels (``B-TYPE``/``I-TYPE``/``O``, named entities), the span F1 of
seqeval's definition (:func:`vaswani.metrics.span_f1`: a span counts when its type, first and last
word match; read as seqeval's default mode reads IOB2 and IOB1)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vaswani.metrics import accuracy_and_macro_f1, class_f1, is_bio, span_f1


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


def report(scores: TagScores, words: int, sentences: int) -> list[str]:
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
