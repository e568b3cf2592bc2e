"""The device side of ``benchmarks/timing.py``: the ``--device`` a benchmark accepts, the matmul peak's
timed sections, the memory read around a run, and the GPU check script's syntax."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from benchmarks import timing

ROOT = Path(__file__).resolve().parents[1]
NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
MIB = 2**20


def refusal(capsys: pytest.CaptureFixture[str], name: str, clock_name: str = "wall") -> str:
    """The one line ``bench_device`` prints before it exits with status 2."""
    with pytest.raises(SystemExit) as exit_info:
        timing.bench_device(name, clock_name, "bench.py")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bench.py: error: --")
    return err


def test_bench_device_takes_the_cpu() -> None:
    assert timing.bench_device("cpu", "cpu", "bench.py") == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_bench_device_refuses_a_missing_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert "'cuda:1'" in refusal(capsys, "cuda:1")


def test_bench_device_refuses_an_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert "'gpu'" in refusal(capsys, "gpu")


@NEEDS_CUDA
def test_bench_device_refuses_the_cpu_clock_on_a_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--clock cpu" in refusal(capsys, "cuda", "cpu")


@pytest.mark.parametrize(("timed_flop", "per_section"), [(0, 1), (4 * 2 * 8 * 16 * 4, 4)])
def test_matmul_peak_times_sections_of_products(
    monkeypatch: pytest.MonkeyPatch, timed_flop: float, per_section: int
) -> None:
    """One warm-up product per shape, then ``reps`` sections of as many products as ``timed_flop``
    asks for; the FLOP/s count every product of a section."""
    calls = []
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b: calls.append(1) or real_mm(a, b))
    ticks = iter(range(100))
    monkeypatch.setattr(timing, "clock", lambda: float(next(ticks)))
    peak = timing.matmul_peak([(8, 16, 4)], torch.float32, 3, torch.device("cpu"), timed_flop)
    assert len(calls) == 1 + 3 * per_section
    assert peak == per_section * 2 * 8 * 16 * 4  # one tick of the fake clock per section


def test_memory_around_sees_an_allocation_on_the_cpu() -> None:
    held = []
    before, peak = timing.memory_around(torch.device("cpu"), lambda: held.append(torch.ones(16 * MIB)))
    assert (peak - before) * 1024 >= 60 * MIB  # 64 MiB of float32 ones, resident while the run held them


@NEEDS_CUDA
def test_memory_around_reads_the_cuda_allocator() -> None:
    device = torch.device("cuda")
    held = []
    before, peak = timing.memory_around(device, lambda: held.append(torch.ones(16 * MIB, device=device)))
    assert 64 * MIB <= (peak - before) * 1024 < 66 * MIB


@NEEDS_CUDA
def test_synced_clock_waits_for_the_gpu() -> None:
    """The time read with ``synced_clock`` after 8 products of 4096² matrices covers the products,
    at least their FLOPs at 1 PFLOP/s (more than any GPU's fp32 rate), not only their launches."""
    device = torch.device("cuda")
    a = torch.randn(4096, 4096, device=device)
    start = timing.synced_clock(device)
    for _ in range(8):
        a @ a
    assert timing.synced_clock(device) - start >= 8 * 2 * 4096**3 / 1e15


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_script_parses() -> None:
    script = ROOT / "benchmarks" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
