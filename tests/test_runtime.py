"""``vaswani.runtime``: seeding makes every generator repeat itself, native bf16 detection reads
torch's CPU helpers (and says False where this torch has none), deterministic mode is one thread,
freed memory is kept for the next tensors."""

from __future__ import annotations

import random
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from vaswani import runtime


def _draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def test_seed_everything_repeats_python_numpy_and_torch():
    runtime.seed_everything(3)
    first = _draws()
    runtime.seed_everything(3)
    assert _draws() == first
    runtime.seed_everything(4)
    assert all(a != b for a, b in zip(_draws(), first, strict=True))


@pytest.mark.parametrize(
    ("avx512_bf16", "amx", "expected"), [(False, False, False), (True, False, True), (False, True, True)]
)
def test_native_bf16_reads_the_cpu_helpers(monkeypatch, avx512_bf16, amx, expected):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    assert runtime.native_bf16() is expected


def test_native_bf16_is_false_without_the_helpers(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported", raising=False)
    monkeypatch.delattr(torch.cpu, "_is_amx_tile_supported", raising=False)
    assert runtime.native_bf16() is False


def test_deterministic_mode_runs_deterministic_algorithms_on_one_thread():
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        runtime.set_threads(2)
        assert torch.get_num_threads() == 2
        runtime.use_deterministic_mode()
        assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)


_REFAULTS = """
import ctypes, resource, sys
from vaswani import runtime
if sys.argv[1] == "keep":
    assert runtime.keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
def faults_writing(size):
    block = libc.malloc(size)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ctypes.memset(block, 1, size)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    libc.free(block)
    return faults
faults_writing(4 << 20)
print(faults_writing(4 << 20))  # the same size again, once freed
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_memory_is_kept_for_the_next_block():
    """A 4 MiB block freed and asked for again: by default glibc had given it back to the system,
    and its 1,024 pages fault in again when written; kept, the block is reused as it is."""
    refaults = {
        mode: int(subprocess.run([sys.executable, "-c", _REFAULTS, mode], capture_output=True, text=True,
                                 check=True).stdout.split()[-1])
        for mode in ("default", "keep")
    }  # fmt: skip
    assert refaults["default"] >= 512
    assert refaults["keep"] < 64


def test_in_passing_thread_returns_and_raises_as_the_call_would():
    caller = threading.get_ident()
    assert runtime.in_passing_thread(lambda a, b: (a + b, threading.get_ident()), 2, 3)[0] == 5
    assert runtime.in_passing_thread(threading.get_ident) != caller
    with pytest.raises(KeyError, match="gone"):
        runtime.in_passing_thread(lambda: {}["gone"])


_POOLS = """
import os, sys, time, torch
from vaswani import runtime
torch.set_num_threads(4)
def threads():
    return len(os.listdir("/proc/self/task"))
def parallel():
    torch.ones(2048, 2048).mul_(2)  # large enough for torch to split it among its threads
before = threads()
runtime.in_passing_thread(parallel) if sys.argv[1] == "passing" else parallel()
deadline = time.monotonic() + 5
while threads() > before and time.monotonic() < deadline:  # the workers' exit is asynchronous
    time.sleep(0.01)
print(threads() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads counted in /proc")
def test_in_passing_thread_leaves_no_openmp_workers_behind():
    """A parallel operator started in the calling thread leaves its OpenMP workers alive; started
    through ``in_passing_thread``, they end with the thread."""
    left = {
        mode: int(subprocess.run([sys.executable, "-c", _POOLS, mode], capture_output=True, text=True,
                                 check=True).stdout.split()[-1])
        for mode in ("caller", "passing")
    }  # fmt: skip
    assert left["caller"] >= 1  # the property the helper exists for is there to see
    assert left["passing"] == 0
