"""The settings of ``vaswani serve``: where it listens, who may call it, and the caps on each request.

Every cap is a flag of ``vaswani serve`` (``cli/serve.py``) of the same name with dashes; a request
over a cap is refused with a 422 naming the field (413 for the body size), a full queue with a 503.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from vaswani.errors import ConfigError

API_KEY_ENV = "VASWANI_API_KEY"


@dataclass(frozen=True)
class ServeSettings:
    """How the server runs.

    ``host``, ``port``: where uvicorn binds. ``api_key``: when set, every ``/v1`` request needs
    ``Authorization: Bearer KEY`` (``/health`` and ``/metrics`` do not). ``cors_origins``: the
    origins allowed by CORS (none: CORS off). ``max_body_bytes``: the largest request body;
    ``max_inputs``: the most texts in one request; ``max_tokens``: the most tokens one request may
    ask to generate; ``max_input_chars``: the longest input text; ``queue_size``: the most requests
    waiting or running per model before a 503; ``max_batch``, ``max_wait_ms``: the batching queue
    of one-shot requests (at most ``max_batch`` requests in one call of the model, collected for
    at most ``max_wait_ms`` after the first). ``device``: where the models run. ``debug``: log the
    traceback of a failed request (never sent to the client). ``quantize``, ``dtype``: the weights of
    the lm and translation runs (``--quantize int8``, ``--dtype bf16``; None: as saved). ``compile``:
    the engines' decoding steps through ``torch.compile`` on static KV caches (``--compile``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = 1_000_000
    max_inputs: int = 64
    max_tokens: int = 512
    max_input_chars: int = 4000
    queue_size: int = 256
    max_batch: int = 16
    max_wait_ms: float = 5.0
    device: str = "auto"
    debug: bool = False
    quantize: str | None = None
    dtype: str | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be in 0..65535, got {self.port}")
        for name in (
            "max_body_bytes",
            "max_inputs",
            "max_tokens",
            "max_input_chars",
            "queue_size",
            "max_batch",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0:
            raise ConfigError(f"--max-wait-ms must be >= 0, got {self.max_wait_ms}")
        if self.api_key is not None and not self.api_key.strip():
            raise ConfigError("--api-key is empty")


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(settings: ServeSettings) -> str | None:
    """The warning line for a server reachable from other machines without an API key, else None."""
    if settings.api_key is None and not is_loopback(settings.host):
        return (
            f"vaswani serve: warning: listening on {settings.host} without an API key: anyone who can "
            f"reach this address can use the models (give --api-key or set {API_KEY_ENV})"
        )
    return None
