"""The server's Prometheus metrics (``/metrics``, through ``prometheus-client``).

One :class:`ServeMetrics` per app, in its own registry (several apps in one process, as in the
tests, do not collide): requests by endpoint and status, latency, tokens generated, queue length
and batch sizes per model, and the generations stopped because their client went away.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)


class ServeMetrics:
    """The metrics of one app."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "vaswani_requests", "HTTP requests", ["endpoint", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "vaswani_request_seconds",
            "request latency (to the last byte of a stream)",
            ["endpoint"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.tokens = Counter(
            "vaswani_tokens_generated", "tokens generated", ["model"], registry=self.registry
        )
        self.queue = Gauge(
            "vaswani_queue_length", "requests waiting or running", ["model"], registry=self.registry
        )
        self.batch = Histogram(
            "vaswani_batch_size",
            "requests per call of a model",
            ["model"],
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=self.registry,
        )
        self.cancelled = Counter(
            "vaswani_generations_cancelled",
            "generations stopped because the client went away",
            ["model"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        """The metrics in Prometheus' text format."""
        return generate_latest(self.registry)
