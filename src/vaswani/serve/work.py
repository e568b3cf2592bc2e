"""The one-shot work of each endpoint as the batching queue runs it: the jobs of one batch share
a key ``(kind, options)``, their inputs are joined into one call of the model's wrapper and the
results split back, one per job.

``runner(served)`` is the ``run`` of that model's :class:`~vaswani.serve.batching.BatchQueue`;
:data:`KINDS` names each kind's batch function ``(wrapper, options, payloads) -> results``, and
beam-search translations (kind ``translate``) stop early when all their clients have gone; kind
``score`` gives the log-probabilities of prompts' tokens (``echo`` with ``logprobs``).
(Completions and greedy or sampled translations run on the continuous-batching engines,
:mod:`vaswani.serve.engine`.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from torch import Tensor

from vaswani.generation.config import DecodingConfig
from vaswani.generation.logprobs import prompt_logprobs
from vaswani.pipelines.classify import TextClassifier
from vaswani.pipelines.encoder import SentenceEncoder
from vaswani.pipelines.image import ImageClassifier
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.mlm import MaskedLanguageModel
from vaswani.pipelines.tag import Tagger
from vaswani.pipelines.translation import Translator
from vaswani.serve.batching import Cancelled, Job
from vaswani.serve.loading import ServedModel

Batch = Callable[[Any, Any, list[Any]], list[Any]]


def joined(payloads: list[list[Any]], run: Callable[[list[Any]], Sequence[Any]]) -> list[list[Any]]:
    """``run`` on all the payloads' items at once, its results cut back into one list per payload."""
    flat = [item for payload in payloads for item in payload]
    results, out, start = list(run(flat)), [], 0
    for payload in payloads:
        out.append(results[start : start + len(payload)])
        start += len(payload)
    return out


def translate_batch(
    translator: Translator, decoding: DecodingConfig, payloads: list[Any], gone: Callable[[], bool]
) -> list[Any]:
    """The n-best translations (beam search) of the jobs' texts in one call; the search stops at a
    step boundary (by :class:`~vaswani.serve.batching.Cancelled`) once ``gone()`` says every
    client has left."""

    def watch(tokens: Tensor) -> bool:
        if gone():
            raise Cancelled
        return False

    return joined(payloads, lambda texts: translator.translate_n_best(texts, decoding, on_step=watch))


def _embed(encoder: SentenceEncoder, options: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, lambda texts: encoder.embed(texts).tolist())


def _classify(classifier: TextClassifier, options: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, lambda texts: classifier.predict([(text,) for text in texts]))


def _tag(tagger: Tagger, options: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, tagger.tag)


def _fill_mask(mlm: MaskedLanguageModel, options: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, lambda texts: [mlm.fill_mask(text, *options) for text in texts])


def _score(lm: LanguageModel, top: int, payloads: list[Any]) -> list[Any]:
    vocab = lm.tokenizer.vocab_size
    return [[prompt_logprobs(lm.model, ids, top, vocab) for ids in payload] for payload in payloads]


def _images(classifier: ImageClassifier, options: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, lambda paths: classifier.predict(paths, *options))


KINDS: dict[str, Batch] = {
    "embed": _embed,
    "classify": _classify,
    "tag": _tag,
    "fill_mask": _fill_mask,
    "images": _images,
    "score": _score,
}


def runner(served: ServedModel) -> Callable[[Sequence[Job]], list[Any]]:
    """The batch function of ``served``'s queue: jobs keyed ``(kind, options)``."""

    def run(jobs: Sequence[Job]) -> list[Any]:
        kind, options = jobs[0].key
        payloads = [job.payload for job in jobs]
        if kind == "translate":
            return translate_batch(served.wrapper, options, payloads, lambda: all(gone(job) for job in jobs))
        return KINDS[kind](served.wrapper, options, payloads)

    return run


def gone(job: Job) -> bool:
    """Whether the client of ``job`` has left (its ``submit`` cancelled; read from the worker thread)."""
    return job.future is not None and job.future.cancelled()
