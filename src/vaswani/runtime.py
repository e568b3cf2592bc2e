"""What the process runs on and how: native bf16 support, seeding, threads and deterministic mode.

Each is a small function that the trainer (or a benchmark) calls once, before building a model;
nothing here depends on a model or a task. The device (CPU, CUDA, several processes) will be
chosen here as well.
"""

from __future__ import annotations

import random

import numpy as np
import torch


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


def use_deterministic_mode() -> None:
    """Deterministic algorithms on one thread: the same sums in the same order on every machine,
    so that a rerun or a resume gives the same weights bit for bit (CPU)."""
    torch.use_deterministic_algorithms(True)
    set_threads(1)
