"""A real ``vaswani serve`` for the tests: uvicorn on 127.0.0.1 on a free port, in a thread."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app: FastAPI) -> Iterator[httpx.Client]:
    """``app`` served on 127.0.0.1 while the block runs; an httpx client of it."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def events(client: httpx.Client, path: str, body: dict[str, Any]) -> list[Any]:
    """The events of a streamed request, parsed (``"[DONE]"`` as the string)."""
    found = []
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                found.append(data if data == "[DONE]" else json.loads(data))
    return found


def metric(client: httpx.Client, name: str, **labels: str) -> float:
    """The value of one sample of ``/metrics`` (0 when absent)."""
    wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


@contextlib.contextmanager
def changed_settings(app: FastAPI, **changes: Any) -> Iterator[None]:
    """``app``'s settings with ``changes`` while the block runs (its requests read them)."""
    before = app.state.settings
    app.state.settings = dataclasses.replace(before, **changes)
    try:
        yield
    finally:
        app.state.settings = before
