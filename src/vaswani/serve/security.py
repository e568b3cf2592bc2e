"""What guards every request: the API key, the body size, the metrics of each request, and a
500 of one line for any failure (the server carries on).

:class:`Guard` is a pure ASGI middleware (it sees a stream to its last byte): it refuses a body
over ``max_body_bytes`` with a 413 (from ``Content-Length``, or while a chunked body is read),
counts each request by endpoint and status with its latency, and turns an exception that no
handler took into a one-line 500 (a failure to allocate memory: a 503; or, once a stream has
started, ends the stream), its traceback's frames cleared so that their tensors are freed; a
request cancelled by the server's shutdown (SIGTERM, past ``--shutdown-s``) is a 503 and one line
in the log. The API key
is checked by :func:`require_key`, a dependency of every ``/v1`` route.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import traceback
from typing import Any

from fastapi import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from vaswani.resources import is_out_of_memory
from vaswani.serve.errors import LOG, ApiError, error_type, log_failure
from vaswani.serve.metrics import ServeMetrics


class BodyTooLarge(Exception):
    """A request body past ``--max-body-bytes``."""


class Guard:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, metrics: ServeMetrics, debug: bool) -> None:
        self.app, self.max_body_bytes, self.metrics, self.debug = app, max_body_bytes, metrics, debug

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [0]
        length = dict(scope.get("headers", ())).get(b"content-length")
        too_large = f"the request body exceeds --max-body-bytes {self.max_body_bytes}"
        seen = [0]

        async def counted_receive() -> Message:
            message = await receive()
            seen[0] += len(message.get("body", b""))
            if seen[0] > self.max_body_bytes:
                raise BodyTooLarge
            return message

        async def watched_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                await reply(watched_send, 413, too_large, "body")
            else:
                await self.app(scope, counted_receive, watched_send)
        except BodyTooLarge:
            if not status[0]:
                await reply(watched_send, 413, too_large, "body")
        except asyncio.CancelledError:  # SIGTERM's shutdown past --shutdown-s: one line, no traceback
            LOG.warning("%s cancelled: the server is shutting down", scope["path"])
            if not status[0]:
                await reply(watched_send, 503, "the server is shutting down; retry later")
        except Exception as exc:
            log_failure(scope["path"], exc, self.debug)
            traceback.clear_frames(exc.__traceback__)  # the memory its frames held given back
            if not status[0]:
                out_of_memory = "out of memory: the request needs more memory than is free; ask for less"
                internal = "internal error: the request failed (see the server's log)"
                if is_out_of_memory(exc):
                    await reply(watched_send, 503, out_of_memory)
                else:
                    await reply(watched_send, 500, internal)
        finally:
            endpoint = getattr(scope.get("route"), "path", "other")  # the route the router matched
            self.metrics.requests.labels(endpoint, str(status[0] or 500)).inc()
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - started)


async def reply(send: Send, status: int, message: str, param: str | None = None) -> None:
    """A whole JSON error response sent on the ASGI channel."""
    body = json.dumps({"error": {"message": message, "type": error_type(status), "param": param}})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})


def require_key(request: Request) -> None:
    """The dependency of every ``/v1`` route: with an API key set, ``Authorization: Bearer KEY``."""
    key: Any = request.app.state.settings.api_key
    if key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), key.encode()):
        raise ApiError(
            401,
            "a valid API key is needed: Authorization: Bearer KEY",
            "authorization",
            {"WWW-Authenticate": "Bearer"},
        )
