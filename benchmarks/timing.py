"""What the side-by-side benchmarks against Hugging Face share: fair interleaving, bf16 autocast on
the CPU (or a GPU), the clock (wall or CPU seconds; synchronised with a GPU), the cores to use, the
processor's and the GPU's names, this process's memory, and a row of results (ours against theirs)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import torch

from vaswani.errors import ConfigError
from vaswani.layers.kernels import onednn_applies, onednn_linear
from vaswani.runtime import keep_freed_memory, resolve_device

CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter

keep_freed_memory()  # every benchmark keeps freed memory for reuse, as the command line does


def interleave(a: Callable[[], None], b: Callable[[], None], rounds: int) -> None:
    """A B B A A B B A …: each measurement of A sits next to one of B, and a linear drift
    of the machine's speed hits both alike."""
    for i in range(rounds):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        first()
        second()


def autocast(bf16: bool, device_type: str = "cpu") -> contextlib.AbstractContextManager[object]:
    """bf16 autocast on the CPU (or on ``device_type``: ``cuda``), or nothing."""
    return torch.autocast(device_type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


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


def device_description(device: torch.device) -> str:
    """A CUDA device's name, memory and CUDA version (``torch.cuda.get_device_name``); the CPU's
    :func:`cpu_description` for the CPU."""
    if device.type != "cuda":
        return cpu_description()
    memory = torch.cuda.get_device_properties(device).total_memory / 2**30
    return f"{torch.cuda.get_device_name(device)}, {memory:,.0f} GiB, CUDA {torch.version.cuda}"


def memory_kib(field: str) -> int:
    """A memory figure of this process from ``/proc/self/status`` in KiB: ``VmRSS`` (now) or ``VmHWM``
    (peak). Unlike ``ru_maxrss``, which survives ``exec`` and so starts a spawned child at its
    parent's peak, ``VmHWM`` belongs to this process's own address space."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def memory_around(device: torch.device, run: Callable[[], None]) -> tuple[int, int]:
    """The memory before ``run()`` and its peak after, in KiB: on the CPU this process's resident
    size (``VmRSS``, then ``VmHWM``: the peak of the whole process, so call it in a fresh one); on a
    GPU the CUDA allocator's (``memory_allocated``, then ``max_memory_allocated`` since a
    ``reset_peak_memory_stats`` just before ``run``)."""
    if device.type != "cuda":
        before = memory_kib("VmRSS")
        run()
        return before, memory_kib("VmHWM")
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    run()
    return before // 1024, torch.cuda.max_memory_allocated(device) // 1024


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


def synced_clock(device: torch.device) -> float:
    """:func:`clock` once the work queued on ``device`` has run (``torch.cuda.synchronize`` on a CUDA
    device, whose kernels finish after the Python calls that launch them return); :func:`clock` on
    the CPU. Read it before and after every timed section of work that may run on a GPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return clock()


def matmul_peak(
    shapes: list[tuple[int, int, int]],
    dtype: torch.dtype,
    reps: int,
    device: torch.device,
    timed_flop: float = 0,
) -> float:
    """FLOP/s of the fastest matrix product among ``shapes`` on ``device``, best of ``reps`` timed
    sections each; a section runs as many products as make up ``timed_flop`` (at least one: on the
    CPU, one). The products are ``torch.mm`` and, where the models' projections use it (float32 on
    the CPU: ``vaswani.layers.kernels``), oneDNN's linear: on a CPU where MKL runs its AVX2 kernels
    (an AMD EPYC with AVX-512), ``torch.mm`` alone would give a peak below what the models reach."""
    best = 0.0
    for m, k, n in shapes:
        a = torch.randn(m, k, dtype=dtype, device=device)
        b = torch.randn(k, n, dtype=dtype, device=device)
        weight = b.t().contiguous()
        products: list[Callable[[], object]] = [functools.partial(torch.mm, a, b)]
        if onednn_applies(a, weight):
            products.append(functools.partial(onednn_linear, a, weight, None, "none"))
        for product in products:
            product()
            count = max(1, round(timed_flop / (2 * m * k * n)))
            for _ in range(reps):
                start = synced_clock(device)
                for _ in range(count):
                    product()
                best = max(best, count * 2 * m * k * n / (synced_clock(device) - start))
    return best


def bench_device(name: str, clock_name: str, program: str) -> torch.device:
    """The ``--device`` to measure on (the CPU or a CUDA GPU). One that is missing, MPS, or a GPU with
    ``--clock cpu`` (this process's CPU seconds do not time a GPU): one line on stderr and exit 2."""
    try:
        device = resolve_device(name)
    except ConfigError as e:
        return refuse(f"{program}: error: --device: {e}")
    if device.type not in ("cpu", "cuda"):
        return refuse(f"{program}: error: --device {name}: this benchmark runs on cpu, cuda or cuda:N")
    if device.type == "cuda" and clock_name == "cpu":
        return refuse(
            f"{program}: error: --clock cpu times this process's CPU seconds, not the GPU's: use wall"
        )
    return device


def refuse(message: str) -> NoReturn:
    """Print ``message`` (one line) on stderr and exit with status 2, as argparse does."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def comparison_table(rows: list[Row], notes: str) -> str:
    """The markdown table of ``rows`` (ours against Hugging Face: medians, ratio, spread, target),
    followed by ``notes``."""
    lines = [
        "| benchmark | precision | ours (median) | HF (median) | ours/HF | ours/HF spread | target |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ours, hf = r.cells()
        ratio, spread = r.ratio_cells()
        lines.append(f"| {r.benchmark} | {r.precision} | {ours} | {hf} | {ratio} | {spread} | {r.target} |")
    return "\n".join(lines) + "\n\n" + notes


RESULTS_ENV = "VASWANI_BENCH_RESULTS"  # the JSON-lines file that benchmarks/run_all.py collects


def record(
    benchmark: str,
    precision: str,
    ours: list[float],
    other: list[float],
    other_name: str = "HF",
    target: str = "",
    ours_name: str = "ours",
) -> None:
    """Append one side-by-side result to the file named by ``$VASWANI_BENCH_RESULTS`` as one JSON line,
    for ``run_all.py``; nothing when it is unset. ``ours`` and ``other`` are paired measurements of the
    same figure (a rate, or a size where ``benchmark`` says "lower is better"); ``target`` is ">= X"
    (the ratio ours/other) or "ours >= X%" (ours itself), as the benchmark's table shows it."""
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    row = {
        "benchmark": benchmark, "precision": precision, "ours_name": ours_name, "ours": ours,
        "other_name": other_name, "other": other, "target": target,
    }  # fmt: skip
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def record_rows(rows: list[Row], other_name: str = "HF") -> None:
    """:func:`record` for each of ``rows``."""
    for r in rows:
        record(r.benchmark, r.precision, r.ours, r.hf, other_name, r.target)
