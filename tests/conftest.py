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
