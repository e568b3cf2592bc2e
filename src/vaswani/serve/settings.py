"""The settings of ``vaswani serve``: where it listens, who may call it, and the caps on each request.

Every cap is a flag of ``vaswani serve`` (``cli/serve.py``) of the same name with dashes; a request
over a cap is refused with a 422 naming the field before any work starts (413 for the body size, the
pixels of its images and the memory its decoding would take), a full queue with a 503. Every setting
is range-checked here, in one line naming its flag, before anything is loaded.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass

from vaswani.errors import ConfigError

API_KEY_ENV = "VASWANI_API_KEY"
MAX_WAIT_MS = 10_000.0  # the longest a batch may wait for more requests: 10 s
MAX_SHUTDOWN_S = 600.0
MAX_STREAM_INTERVAL_MS = 1000.0  # the longest a stream's tokens may gather: 1 s
INT_CAPS = (
    "max_body_bytes", "max_inputs", "max_tokens", "max_input_chars", "max_prompt_tokens", "max_beam",
    "max_images", "max_image_pixels", "queue_size", "max_batch",
)  # fmt: skip


@dataclass(frozen=True)
class ServeSettings:
    """How the server runs.

    ``host``, ``port``: where uvicorn binds. ``api_key``: when set, every ``/v1`` request needs
    ``Authorization: Bearer KEY`` (``/health`` and ``/metrics`` do not). ``cors_origins``: the
    origins allowed by CORS (none: CORS off). ``max_body_bytes``: the largest request body;
    ``max_inputs``: the most texts in one request; ``max_tokens``: the most tokens one request may
    ask to generate; ``max_input_chars``: the longest input text; ``max_prompt_tokens``: the most
    tokens of a prompt or source text; ``max_beam``: the widest beam search; ``max_images``: the
    most images in one request; ``max_image_pixels``: the most pixels (width × height, summed over
    its images, read from their headers before decoding) of one request; ``max_request_mib``: the
    most memory (MiB) a request's decoding is estimated to take (:mod:`vaswani.serve.limits`);
    ``shutdown_s``: how long SIGTERM waits for the requests in flight before cancelling them;
    ``queue_size``: the most requests waiting or running per model before a 503; ``max_batch``,
    ``max_wait_ms``: the batching queue of one-shot requests (at most ``max_batch`` requests in one
    call of the model, collected for at most ``max_wait_ms`` after the first, at most 10 s).
    ``stream_interval_ms``: after a streamed event, how long the tokens that follow gather before
    the next (the first token and a row's end are never held; 0: an event per token, at most 1 s).
    ``device``: where the models run. ``debug``: log the traceback of a failed request (never sent
    to the client). ``quantize``, ``dtype``: the weights of
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
    max_prompt_tokens: int = 1024
    max_beam: int = 16
    max_images: int = 16
    max_image_pixels: int = 50_000_000
    max_request_mib: float = 2048.0
    shutdown_s: float = 5.0
    queue_size: int = 256
    max_batch: int = 16
    max_wait_ms: float = 5.0
    stream_interval_ms: float = 10.0
    device: str = "auto"
    debug: bool = False
    quantize: str | None = None
    dtype: str | None = None
    compile: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be in 0..65535, got {self.port}")
        for name in INT_CAPS:
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not (math.isfinite(self.max_wait_ms) and 0 <= self.max_wait_ms <= MAX_WAIT_MS):
            raise ConfigError(f"--max-wait-ms must be in 0..{MAX_WAIT_MS:g}, got {self.max_wait_ms:g}")
        interval = self.stream_interval_ms
        if not (math.isfinite(interval) and 0 <= interval <= MAX_STREAM_INTERVAL_MS):
            limit = f"{MAX_STREAM_INTERVAL_MS:g}"
            raise ConfigError(f"--stream-interval-ms must be in 0..{limit}, got {interval:g}")
        if not (math.isfinite(self.max_request_mib) and self.max_request_mib > 0):
            raise ConfigError(f"--max-request-mib must be a finite number > 0, got {self.max_request_mib:g}")
        if not (math.isfinite(self.shutdown_s) and 0 <= self.shutdown_s <= MAX_SHUTDOWN_S):
            raise ConfigError(f"--shutdown-s must be in 0..{MAX_SHUTDOWN_S:g}, got {self.shutdown_s:g}")
        if not self.host.strip() or self.host != self.host.strip():
            raise ConfigError(
                f"--host must be an address such as 127.0.0.1 or 0.0.0.0, got {self.host!r} "
                "(an empty one would listen on every interface)"
            )
        if self.api_key is not None:
            check_api_key(self.api_key)


def check_api_key(key: str) -> None:
    """Refuse an API key that no client can send: empty, or not printable ASCII without spaces
    at its ends (HTTP headers are latin-1, and a bearer token is ASCII)."""
    if not key.strip():
        raise ConfigError(f"--api-key (or {API_KEY_ENV}) is empty")
    if not (key.isascii() and key.isprintable()) or key != key.strip():
        raise ConfigError(
            f"--api-key (or {API_KEY_ENV}) must be printable ASCII without spaces at its ends (a "
            "client sends it in an HTTP header)"
        )


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
