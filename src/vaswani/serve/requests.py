"""What every endpoint does with a request before running a model: the served model it names,
the caps on its inputs, and the ``DecodingConfig`` its fields make.

``served_model(request, name, tasks)``, ``texts(value, settings)``, ``check_max_tokens`` and
``decoding_of(fields)``: each raises an :class:`~vaswani.serve.errors.ApiError` (or
``DecodingConfig``'s own one-line error) naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import Request

from vaswani.errors import DataError
from vaswani.generation.config import DecodingConfig
from vaswani.pipelines.common import refuse_empty
from vaswani.serve.batching import BatchQueue
from vaswani.serve.errors import ApiError
from vaswani.serve.loading import ServedModel
from vaswani.serve.settings import ServeSettings


def served_model(request: Request, name: str | None, tasks: Sequence[str]) -> tuple[ServedModel, BatchQueue]:
    """The served model ``name`` of one of ``tasks`` (None: the only such model) and its queue."""
    models: dict[str, ServedModel] = request.app.state.models
    fitting = [m for m in models.values() if m.task in tasks]
    path = request.url.path
    if name is None:
        if len(fitting) == 1:
            model = fitting[0]
        elif not fitting:
            raise ApiError(404, f"model: no {' or '.join(tasks)} run is served; {path} needs one", "model")
        else:
            names = ", ".join(m.name for m in fitting)
            raise ApiError(422, f"model: several models are served ({names}): name one", "model")
    elif name not in models:
        raise ApiError(404, f"model: no model {name!r} is served (served: {', '.join(models)})", "model")
    else:
        model = models[name]
        if model.task not in tasks:
            raise ApiError(
                422,
                f"model: {name!r} is a {model.task} run; {path} serves {' or '.join(tasks)} runs",
                "model",
            )
    return model, request.app.state.queues[model.name]


def texts(
    value: str | list[str],
    settings: ServeSettings,
    field: str = "input",
    count_only: bool = False,
    may_be_empty: bool = False,
) -> list[str]:
    """``value`` as a list of texts, at most ``--max-inputs`` of them, each
    (unless ``count_only``: base64 images, whose size the body cap bounds) within
    ``--max-input-chars`` and, unless ``may_be_empty`` (a language model's prompt), holding more
    than white space (:func:`~vaswani.pipelines.common.refuse_empty`, as the command line checks)."""
    items = [value] if isinstance(value, str) else list(value)
    if not items:
        raise ApiError(422, f"{field}: give at least one text", field)
    if len(items) > settings.max_inputs:
        raise ApiError(
            422, f"{field}: {len(items)} texts exceed the server's --max-inputs {settings.max_inputs}", field
        )
    if not (count_only or may_be_empty):
        try:
            refuse_empty(items, "text")
        except DataError as exc:
            raise ApiError(422, f"{field}: {exc}", field) from None
    for i, text in enumerate(items):
        if not count_only and len(text) > settings.max_input_chars:
            where = field if isinstance(value, str) else f"{field}.{i}"
            raise ApiError(
                422,
                f"{where}: {len(text)} characters exceed the server's --max-input-chars "
                f"{settings.max_input_chars}",
                field,
            )
    return items


def check_max_tokens(value: int | None, settings: ServeSettings, field: str = "max_tokens") -> None:
    """``value`` within 1..``settings.max_tokens`` (None: not given)."""
    if value is not None and not 1 <= value <= settings.max_tokens:
        raise ApiError(
            422,
            f"{field}: must be in 1..{settings.max_tokens} (the server's --max-tokens), got {value}",
            field,
        )


def decoding_of(fields: dict[str, Any]) -> DecodingConfig:
    """The ``DecodingConfig`` of a request's decoding fields (its None values left unset); its
    own validation names the field (``decoding.beam: ...``, a 422)."""
    return DecodingConfig(**{k: v for k, v in fields.items() if v is not None})
