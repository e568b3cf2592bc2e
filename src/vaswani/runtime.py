"""What the process runs on and how: the device, native bf16 support, seeding, threads,
deterministic mode and how the C library keeps freed memory; whether ``torch.compile`` can work
here, and its failures in one line.

Each is a small function that the trainer, a wrapper's ``load`` (or a benchmark) calls once, before
building a model; nothing here depends on a model or a task.
"""

from __future__ import annotations

import ctypes
import os
import random
import re
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import torch

from vaswani.errors import ConfigError

DEVICES = "auto, cpu, cuda, cuda:N or mps"
DEVICE_NAME = re.compile(r"auto|cpu|mps|cuda(?::(\d+))?")
T = TypeVar("T")
Resolved = torch.device | None
"""A device the caller resolved already (a run's lifecycle resolves the training device once), or
None: resolve it where it is needed."""


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """The device ``name`` stands for: ``auto`` is CUDA where a GPU is visible, else MPS (Apple
    silicon), else the CPU; ``cuda`` is the current CUDA device, ``cuda:N`` the N-th. A device
    this machine lacks is a one-line :class:`ConfigError` (the CLI exits 2 on it)."""
    name = str(name)
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("mps" if mps_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "mps":
        if not mps_available():
            raise ConfigError("device 'mps': no Apple MPS device is available here; use --device cpu or auto")
        return torch.device("mps")
    found = DEVICE_NAME.fullmatch(name)
    if found is None:
        raise ConfigError(f"device {name!r}: expected {DEVICES}")
    if not torch.cuda.is_available():
        why = "this torch is built for the CPU only" if torch.version.cuda is None else "no GPU is visible"
        raise ConfigError(f"device {name!r}: CUDA is not available here ({why}); use --device cpu or auto")
    index = torch.cuda.current_device() if found.group(1) is None else int(found.group(1))
    if index >= torch.cuda.device_count():
        raise ConfigError(
            f"device {name!r}: this machine has {torch.cuda.device_count()} CUDA device(s), cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1}"
        )
    return torch.device("cuda", index)


def mps_available() -> bool:
    """Whether an Apple MPS device can be used (False where this torch has no MPS backend)."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def auto_precision(device: str | torch.device = "auto") -> str:
    """A recipe's ``precision: auto``: ``bf16`` where ``device`` computes bf16 natively (a CUDA GPU
    with bf16 support, a CPU with AVX512-BF16 or AMX), else ``fp32``."""
    resolved = resolve_device(device)
    if resolved.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    if resolved.type == "cpu":
        return "bf16" if native_bf16() else "fp32"
    return "fp32"


def native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (AVX512-BF16 or AMX), where bf16 autocast trains
    several times faster than fp32 (a private torch helper, absent from some builds: False then)."""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators; call it before building the model."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def set_threads(threads: int) -> None:
    """Use ``threads`` intra-op threads for torch's CPU kernels."""
    torch.set_num_threads(threads)


THREADS_PER_CORE = 4
"""The most intra-op threads a run may ask for, per CPU core: past the cores, more threads only
slow torch's kernels down (thousands of them: a hundred times slower, or out of memory)."""


def cpu_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system says, else all)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def check_threads(threads: int | None) -> None:
    """Refuse ``threads`` (``train.threads``) above :data:`THREADS_PER_CORE` times the cores."""
    limit = THREADS_PER_CORE * cpu_cores()
    if threads is not None and threads > limit:
        raise ConfigError(
            f"config field 'train.threads': must be at most {limit} ({THREADS_PER_CORE} per CPU core, "
            f"{cpu_cores()} here), got {threads}"
        )


def check_processes(nproc: int) -> None:
    """Refuse ``--nproc`` below 1 or above this machine's processors: its CPU cores, or its CUDA
    devices where it has more (one process each)."""
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    limit = max(cpu_cores(), devices)
    if not 1 <= nproc <= limit:
        raise ConfigError(
            f"--nproc: must be in [1, {limit}] (one process per CPU core or CUDA device of this machine), "
            f"got {nproc}"
        )


MMAP_THRESHOLD = 32 << 20
"""glibc's largest ``M_MMAP_THRESHOLD`` (32 MiB on 64-bit): blocks up to it come from the heap."""

TRIM_THRESHOLD = 1 << 30
"""The free memory (1 GiB) at the top of glibc's heaps past which it is given back to the system."""


def keep_freed_memory() -> bool:
    """Keep the memory that tensors free for the next ones, rather than glibc's default of giving
    it back to the system: blocks of up to 32 MiB come from the heap (``M_MMAP_THRESHOLD``) and up
    to 1 GiB of free heap is kept (``M_TRIM_THRESHOLD``). By default a block of more than 128 KiB
    is mapped for each tensor and unmapped when freed, so the next tensor's pages fault in again,
    zeroed by the kernel: 122,000 page faults in three beam-search passes over 1,000 sentences of a
    2 + 2-layer translator, 623-911 with this (AMD EPYC, one thread), 5-20% of its time. What jemalloc or
    tcmalloc preloaded would do, through ``mallopt``; the command line calls it once. True where it
    applied (Linux with glibc), False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries: nothing to tune
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, MMAP_THRESHOLD)) and bool(mallopt(m_trim_threshold, TRIM_THRESHOLD))


def in_passing_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` run in a thread that ends when it returns (its exception raised here), so
    that the OpenMP workers its parallel operators started end with it.

    Each thread that starts parallel torch operators on the CPU keeps a pool of ``threads - 1``
    OpenMP workers for as long as it lives. Where a model is loaded in one thread (the main one)
    and generates in another (a server's engine), the process holds two pools; once libgomp
    manages more threads than there are cores, it stops spinning between parallel regions and
    every region waits for sleeping workers to wake. On 2 cores at 2 threads a served completion ran
    at 0.61-0.85 of direct generation with the model loaded on the main thread, 0.90-1.26 loaded
    through this (``benchmarks/serve_load.py --speed-only --threads 2``, three rounds each)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, fn(*args)))
        except BaseException as exc:  # raised in the caller's thread
            outcome.append((False, exc))

    thread = threading.Thread(target=run, name="vaswani-passing", daemon=True)
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def use_deterministic_mode() -> None:
    """Deterministic algorithms on one thread: the same sums in the same order on every machine,
    so that a rerun or a resume gives the same weights bit for bit (CPU)."""
    torch.use_deterministic_algorithms(True)
    set_threads(1)


CompileBackend = str | Callable[..., Any]
"""What ``torch.compile`` compiles with: a backend's name ("inductor", "eager", "aot_eager") or one."""


def compile_unsupported(device: torch.device, backend: CompileBackend) -> str | None:
    """Why ``torch.compile`` with ``backend`` cannot work for a model on ``device`` here, as far as
    a cheap check tells (dynamo's platform and Python version; inductor's C++ compiler for the CPU,
    Triton for CUDA); None where it may. Training's and decoding's ``--compile`` both ask it."""
    if not torch._dynamo.is_dynamo_supported():
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return f"dynamo does not support Python {version} on {sys.platform}"
    if backend != "inductor":
        return None
    if device.type == "cpu":
        try:
            from torch._inductor.cpp_builder import get_cpp_compiler

            get_cpp_compiler()
        except Exception as exc:  # InvalidCxxCompiler, or an import error of a build without it
            return f"inductor finds no C++ compiler for the CPU: {compile_failure(exc)}"
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            return "inductor needs Triton for CUDA, and it is not installed"
    return None


def compile_failure(exc: BaseException) -> str:
    """``exc`` as one short line: the type and the first line of the message of its first cause
    (dynamo wraps a backend's error in ``BackendCompilerFailed``)."""
    while True:
        inner = getattr(exc, "inner_exception", None) or exc.__cause__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    lines = str(exc).strip().splitlines()
    text = lines[0][:200] if lines else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
