"""What the side-by-side benchmarks against Hugging Face share: fair interleaving, bf16 autocast on
the CPU, the clock (wall or CPU seconds), the cores to use, this process's memory, and a row of
results (ours against theirs)."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter


def interleave(a: Callable[[], None], b: Callable[[], None], rounds: int) -> None:
    """A B B A A B B A …: each measurement of A sits next to one of B, and a linear drift
    of the machine's speed hits both alike."""
    for i in range(rounds):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        first()
        second()


def autocast(bf16: bool) -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on the CPU, or nothing."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def available_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_description() -> str:
    """The CPU's model name and the flags that decide its kernels (AVX2, AVX512, AVX512-BF16, AMX),
    from ``/proc/cpuinfo`` (the platform's name elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            info = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    pairs = (line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in pairs}
    present = [f for f in FLAGS if f in fields.get("flags", "").split()]
    named = " ".join(present) or "none of " + ", ".join(FLAGS)
    return f"{fields.get('model name') or platform.machine()}; flags: {named}"


def memory_kib(field: str) -> int:
    """A memory figure of this process from ``/proc/self/status`` in KiB: ``VmRSS`` (now) or ``VmHWM``
    (peak). Unlike ``ru_maxrss``, which survives ``exec`` and so starts a spawned child at its
    parent's peak, ``VmHWM`` belongs to this process's own address space."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


@dataclass
class Row:
    """Ours against Hugging Face: medians of the rates and the median of the per-pair ratios."""

    benchmark: str
    precision: str
    ours: list[float]
    hf: list[float]
    target: str = ""

    @property
    def ratios(self) -> list[float]:
        return sorted(a / b if b else math.nan for a, b in zip(self.ours, self.hf, strict=True))

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> str:
        r = self.ratios
        if len(r) < 4:
            return f"{r[0]:.2f}–{r[-1]:.2f}"
        q1, _, q3 = statistics.quantiles(r, n=4)
        return f"{q1:.2f}–{q3:.2f}"

    def ratio_cells(self) -> tuple[str, str]:
        """The median ratio and its interquartile range (n/a where a figure is 0)."""
        if any(math.isnan(r) for r in self.ratios):
            return "n/a", ""
        return f"**{self.ratio:.2f}**", self.spread

    def cells(self) -> tuple[str, str]:
        return f"{statistics.median(self.ours):,.1f}", f"{statistics.median(self.hf):,.1f}"


def add_clock_flag(parser: argparse.ArgumentParser) -> None:
    """``--clock wall|cpu``; a benchmark applies it with :func:`use_clock`."""
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed seconds; cpu: this process's CPU seconds, which a busy neighbour "
        "does not inflate (meaningful with --threads 1 only: idle OpenMP threads spin)",
    )


def use_clock(name: str) -> None:
    """Make :func:`clock` read the ``name`` clock."""
    global _clock
    _clock = CLOCKS[name]


def clock() -> float:
    """Seconds on the chosen clock (wall by default)."""
    return _clock()
