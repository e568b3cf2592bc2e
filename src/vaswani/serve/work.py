"""The one-shot work of each endpoint as the batching queue runs it: the jobs of one batch share
a key ``(kind, options)``, their inputs are joined into one call of the model's wrapper and the
results split back, one per job.

``runner(served)`` is the ``run`` of that model's :class:`~vaswani.serve.batching.BatchQueue`;
:data:`KINDS` names each kind's batch function ``(wrapper, options, payloads) -> results``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vaswani.serve.batching import Job
from vaswani.serve.generate import complete
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


def _complete(lm: Any, decoding: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, lambda prompts: complete(lm, prompts, decoding))


def _translate(translator: Any, decoding: Any, payloads: list[Any]) -> list[Any]:
    if decoding.strategy == "beam":
        return joined(payloads, lambda texts: translator.translate_n_best(texts, decoding))
    return joined(payloads, lambda texts: translator.translate(texts, decoding))


def _embed(encoder: Any, options: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, lambda texts: encoder.embed(texts).tolist())


def _classify(classifier: Any, options: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, lambda texts: classifier.predict([(text,) for text in texts]))


def _tag(tagger: Any, options: Any, payloads: list[Any]) -> list[Any]:
    return joined(payloads, tagger.tag)


def _each(method: str) -> Batch:
    """A batch function calling ``wrapper.method(payload, *options)`` once per payload."""
    return lambda wrapper, options, payloads: [getattr(wrapper, method)(p, *options) for p in payloads]


KINDS: dict[str, Batch] = {
    "complete": _complete,
    "translate": _translate,
    "embed": _embed,
    "classify": _classify,
    "tag": _tag,
    "fill_mask": _each("fill_mask"),
    "images": _each("predict"),
}


def runner(served: ServedModel) -> Callable[[Sequence[Job]], list[Any]]:
    """The batch function of ``served``'s queue: jobs keyed ``(kind, options)``."""

    def run(jobs: Sequence[Job]) -> list[Any]:
        kind, options = jobs[0].key
        return KINDS[kind](served.wrapper, options, [job.payload for job in jobs])

    return run
