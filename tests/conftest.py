"""Shared test settings."""

from __future__ import annotations

import signal

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """The test models are tiny: one intra-op thread is faster than two, and much faster
    on a machine whose other core is busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def _sigint_not_ignored():
    """A shell that starts pytest in the background (``nohup … &``) makes it ignore SIGINT, and
    the trainer rightly leaves an ignored signal alone; the tests that press Ctrl-C need the
    usual handler."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Every test's ``torch.compile`` graphs forgotten after it: dynamo keeps them per function for
    the whole process, and the graphs of the tests' many tiny models would otherwise add up to its
    recompile limit (a server holds the graphs of its own few models only). Only after a test that
    compiled: a reset costs about 10 ms."""
    frames = torch._dynamo.utils.counters["frames"]
    before = frames["total"]
    yield
    if frames["total"] != before:
        torch._dynamo.reset()
