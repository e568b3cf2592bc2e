"""``vaswani serve RUN_DIR [RUN_DIR ...]``: the runs behind an HTTP API (:mod:`vaswani.serve`).

Every run is loaded before the port is bound: one that does not load stops the command with one
line (exit 2), and so does a setting out of its range. Binding a non-loopback address without an
API key prints a warning line. SIGTERM (or Ctrl-C) stops taking requests, lets those in flight
finish for at most ``--shutdown-s`` seconds, cancels the rest (generation stops at its next step)
and exits.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from vaswani.cli.common import add_device_flag, add_weights_flags
from vaswani.cli.decoding import add_compile_flag


def add_parser(commands: Any) -> None:
    from vaswani.serve.settings import API_KEY_ENV, ServeSettings

    caps = ServeSettings()
    p = commands.add_parser(
        "serve",
        help="serve trained runs over HTTP (OpenAI-style API, streaming, batching)",
        description="Serve every RUN_DIR over HTTP: /v1/models, /v1/completions (lm), /v1/translations, "
        "/v1/embeddings, /v1/classifications, /v1/fill-mask, /v1/tags, /v1/images/classifications, "
        "/v1/attention, /health, /metrics; the API's schema is /openapi.json. Every request is "
        "checked against the caps below before any work starts (422 naming the field; 413 for the "
        "body, the images' pixels and the estimated memory). SIGTERM lets the requests in flight "
        "finish for --shutdown-s seconds, cancels the rest, and exits.",
    )
    p.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    p.add_argument("--host", default=caps.host, help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=caps.port)
    p.add_argument("--api-key", help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV})")
    p.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow this origin by CORS (repeatable; default: CORS off)",
    )
    for name, help_text in (
        ("max_body_bytes", "the largest request body"),
        ("max_inputs", "the most texts (or n completions) in one request"),
        ("max_tokens", "the most tokens one request may generate"),
        ("max_input_chars", "the longest input text"),
        ("max_prompt_tokens", "the most tokens of a prompt or a source text"),
        ("max_beam", "the widest beam search (beam)"),
        ("max_images", "the most images in one request"),
        ("max_image_pixels", "the most pixels (width x height, all its images) of one request"),
        ("queue_size", "the most requests waiting or running per model before a 503"),
        ("max_batch", "the most one-shot requests in one call of a model"),
    ):
        p.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=getattr(caps, name),
            help=f"{help_text} (default {getattr(caps, name)})",
        )
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=caps.max_wait_ms,
        help=f"how long a batch waits for more requests, 0..10000 (default {caps.max_wait_ms})",
    )
    p.add_argument(
        "--stream-interval-ms",
        type=float,
        default=caps.stream_interval_ms,
        help="how long the tokens after a streamed event gather before the next, 0..1000 (0: an event "
        f"per token; the first token and the end are never held; default {caps.stream_interval_ms:g})",
    )
    p.add_argument(
        "--max-request-mib",
        type=float,
        default=caps.max_request_mib,
        help="the most memory (MiB) one request's decoding may take by its estimate (KV caches, "
        f"beams, logits); past it, a 413 (default {caps.max_request_mib:g})",
    )
    p.add_argument(
        "--shutdown-s",
        type=float,
        default=caps.shutdown_s,
        help="on SIGTERM, how long the requests in flight may finish before they are cancelled "
        f"(default {caps.shutdown_s:g})",
    )
    add_device_flag(p)
    add_compile_flag(p)
    add_weights_flags(p)
    p.set_defaults(handler=cmd_serve)


def settings_of(args: argparse.Namespace) -> Any:
    """The :class:`~vaswani.serve.settings.ServeSettings` of the command's flags."""
    from vaswani.serve.settings import API_KEY_ENV, ServeSettings

    return ServeSettings(
        host=args.host,
        port=args.port,
        api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        cors_origins=tuple(args.cors_origin),
        max_body_bytes=args.max_body_bytes,
        max_inputs=args.max_inputs,
        max_tokens=args.max_tokens,
        max_input_chars=args.max_input_chars,
        max_prompt_tokens=args.max_prompt_tokens,
        max_beam=args.max_beam,
        max_images=args.max_images,
        max_image_pixels=args.max_image_pixels,
        max_request_mib=args.max_request_mib,
        shutdown_s=args.shutdown_s,
        queue_size=args.queue_size,
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        stream_interval_ms=args.stream_interval_ms,
        device=args.device,
        debug=args.debug,
        compile=args.compile,
        quantize=args.quantize,
        dtype=args.dtype,
    )


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from vaswani.serve.app import create_app
    from vaswani.serve.settings import exposure_warning

    settings = settings_of(args)
    app = create_app(args.run_dirs, settings)
    warning = exposure_warning(settings)
    if warning:
        print(warning, file=sys.stderr)
    try:
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level="debug" if settings.debug else "info",
            timeout_graceful_shutdown=settings.shutdown_s,
        )
    finally:
        for engine in app.state.engines.values():  # their rows cancelled, their threads ended
            engine.close()
