"""Evaluation metrics: BLEU and chrF through sacrebleu, on detokenised text; perplexity; accuracy
and macro-F1 of class ids."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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


def accuracy_and_macro_f1(predicted: Tensor, gold: Tensor) -> tuple[float, float]:
    """Accuracy and macro-F1 (the mean of 2 TP_c / (|predicted c| + |gold c|) over the classes
    that occur in either) of class ids (n,)."""
    classes = torch.unique(torch.cat([predicted, gold]))
    f1 = [
        2.0
        * float(((predicted == c) & (gold == c)).sum())
        / float((predicted == c).sum() + (gold == c).sum())
        for c in classes
    ]
    return float((predicted == gold).float().mean()), sum(f1) / len(f1)


def is_cjk(text: str) -> bool:
    """Whether most letters of ``text`` are CJK ideographs (then BLEU needs ``tokenize="zh"``)."""
    letters = [c for c in text if c.isalpha()]
    cjk = sum(1 for c in letters if "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf")
    return bool(letters) and cjk / len(letters) > 0.5
