"""Errors as the server answers them: one JSON line naming the field, never a traceback.

Every error body is ``{"error": {"message": ..., "type": ..., "param": FIELD}}`` (OpenAI's shape).
:func:`install_handlers` turns pydantic's validation errors and a :class:`~vaswani.errors.VaswaniError`
(e.g. ``DecodingConfig``'s ``decoding.beam: ...``) into 422s, :class:`ApiError` into its status, a
full queue into a 503 with ``Retry-After``; anything else becomes a 500 in
:class:`~vaswani.serve.security.Guard`, its traceback in the server's log only with ``--debug``
(:func:`log_failure`).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from vaswani.errors import VaswaniError
from vaswani.serve.batching import QueueFull

LOG = logging.getLogger("vaswani.serve")
RETRY_AFTER_S = 1
TYPES = {401: "authentication_error", 404: "not_found_error", 413: "request_too_large",
         503: "overloaded_error"}  # fmt: skip


def error_type(status: int) -> str:
    """The ``type`` of an error body: :data:`TYPES`' name, else ``invalid_request_error`` for every
    other 4xx (a 405, a 422: the client's to fix, as OpenAI types them) and ``server_error``."""
    return TYPES.get(status, "invalid_request_error" if 400 <= status < 500 else "server_error")


class ApiError(Exception):
    """A request the server refuses: ``status``, a one-line ``message`` and the ``param`` it names."""

    def __init__(
        self, status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers or {}


def error_response(status: int, message: str, param: str | None = None, **headers: str) -> JSONResponse:
    body = {"error": {"message": message, "type": error_type(status), "param": param}}
    return JSONResponse(body, status_code=status, headers=headers or None)


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The first of pydantic's errors as one line naming its field, and the field."""
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [part for part in first.get("loc", ()) if part != "body"]
    # The field and the list indices in it; not the names of a union's members ("str", "list[str]").
    where = ".".join(str(part) for i, part in enumerate(loc) if i == 0 or isinstance(part, int))
    field = str(loc[0]) if loc else None
    message = first.get("msg", "invalid value")
    if first.get("type") == "extra_forbidden":
        message = "unknown field"
    elif first.get("type") == "json_invalid":
        return "the body is not valid JSON", None
    return (f"{where}: {message}" if where else message), field


def vaswani_param(message: str) -> str | None:
    """The field a vaswani error names (``decoding.beam: ...`` → ``beam``), if it names one."""
    found = re.match(r"decoding\.(\w+)|(\w+):", message)
    return (found.group(1) or found.group(2)) if found else None


def install_handlers(app: FastAPI) -> None:
    """The app's exception handlers (see the module docstring)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, field = validation_message(list(exc.errors()))
        return error_response(422, message, field)

    @app.exception_handler(ApiError)
    async def refused(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, **exc.headers)

    @app.exception_handler(VaswaniError)
    async def bad_input(request: Request, exc: VaswaniError) -> JSONResponse:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return error_response(422, message, vaswani_param(message))

    @app.exception_handler(QueueFull)
    async def full(request: Request, exc: QueueFull) -> JSONResponse:
        return error_response(
            503, f"server busy: {exc}; retry later", None, **{"Retry-After": str(RETRY_AFTER_S)}
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), None, **(exc.headers or {}))


def log_failure(path: str, exc: BaseException, debug: bool) -> None:
    """One line in the server's log, with the traceback under ``--debug``."""
    LOG.error("%s failed: %s: %s", path, type(exc).__name__, exc, exc_info=exc if debug else None)
