"""Every benchmark script's ``--quick`` smoke run, so that a refactor cannot break one unnoticed.

Each ``benchmarks/*.py`` that runs as a script is run with ``--quick`` in a child process (seconds:
tiny models, few steps; ``benchmarks/quick.py`` trains the tiny runs the scripts that measure run
directories need). A run must exit 0 and leave every committed result (``benchmarks/results/``)
byte-identical: a smoke run is not a measurement. ``run_all.py`` runs one of its jobs, into a table
in the test's folder. A script that reads a data set of ``../shared/data`` is skipped where that
folder is absent. The figures the runs print are not checked: tiny models on a busy machine.

The selected scripts start together, as many at a time as this test process has cores (at most two;
under pytest-xdist, which the suite runs on, the cores over its workers), each on one torch thread:
most of a smoke run is a Python process starting, importing and training a tiny model, which one
core does (on two quiet cores of an AMD EPYC, the suite in one process: 319 s one at a time, 194 s
two at a time).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
SHARED = ROOT.parent / "shared" / "data"
SCRIPTS = sorted(
    p.name for p in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__":' in p.read_text(encoding="utf-8")
)
NEEDS = {  # the data set of ../shared/data that a script's --quick run reads
    "gpt_transfer.py": "sst2",
    "length_extrapolation.py": "tinyshakespeare",
    "lora.py": "sst2",
    "marian_speed.py": "multi30k",
    "shakespeare_char.py": "tinyshakespeare",
    "sst2.py": "sst2",
}
ARGS = {"run_all.py": ["--only", "local attention", "--output", "{tmp}/performance.md"]}


def committed_results() -> dict[str, str]:
    """SHA-256 of every file under ``benchmarks/results``, by path."""
    return {
        str(p.relative_to(BENCHMARKS)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted((BENCHMARKS / "results").rglob("*"))
        if p.is_file()
    }


def test_every_script_is_listed():
    assert {"run_all.py", "translation_results.py", "speculative.py"} <= set(SCRIPTS)
    assert "quick.py" not in SCRIPTS and "timing.py" not in SCRIPTS  # modules, not benchmarks


def quick_run(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    """``benchmarks/SCRIPT --quick`` in ``folder`` on one torch thread, its output captured."""
    extra = [a.format(tmp=folder) for a in ARGS.get(script, [])]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "VASWANI_BENCH_RESULTS": str(folder / "results.jsonl"),
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", *extra],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


Runs = tuple[dict[str, str], dict[str, Future[subprocess.CompletedProcess[str]]]]


def spare_cores() -> int:
    """This process's share of the cores: all of them, or under pytest-xdist the cores over its
    workers (each worker runs its tests on one core)."""
    return (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


@pytest.fixture(scope="module")
def quick_runs(request, tmp_path_factory) -> Iterator[Runs]:
    """The committed results before any run, and the ``--quick`` runs of the scripts this session
    selected (those it can run), started in the order their tests run, ``min(2, spare_cores())``
    at a time: a future by script."""
    selected = [
        item.callspec.params["script"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_quick_run"
    ]
    runnable = [s for s in selected if s not in NEEDS or (SHARED / NEEDS[s]).is_dir()]
    before = committed_results()
    pool = ThreadPoolExecutor(max_workers=max(1, min(2, spare_cores())))
    try:
        yield before, {s: pool.submit(quick_run, s, tmp_path_factory.mktemp(s[:-3])) for s in runnable}
    finally:
        pool.shutdown(cancel_futures=True)  # those not started yet, where a test was interrupted


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_quick_run(script, quick_runs):
    if script in NEEDS and not (SHARED / NEEDS[script]).is_dir():
        pytest.skip(f"no ../shared/data/{NEEDS[script]}")
    before, runs = quick_runs
    run = runs[script].result()
    assert run.returncode == 0, f"{script} --quick failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert committed_results() == before, f"{script} --quick changed benchmarks/results"
