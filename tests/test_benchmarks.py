"""Every benchmark script's ``--quick`` smoke run, so that a refactor cannot break one unnoticed.

Each ``benchmarks/*.py`` that runs as a script is run with ``--quick`` in a child process (seconds:
tiny models, few steps; ``benchmarks/quick.py`` trains the tiny runs the scripts that measure run
directories need). A run must exit 0 and leave every committed result (``benchmarks/results/``)
byte-identical: a smoke run is not a measurement. ``run_all.py`` runs one of its jobs, into a table
in the test's folder. A script that reads a data set of ``../shared/data`` is skipped where that
folder is absent. The figures the runs print are not checked: tiny models on a busy machine.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
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


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS)
def test_quick_run(script, tmp_path):
    if script in NEEDS and not (SHARED / NEEDS[script]).is_dir():
        pytest.skip(f"no ../shared/data/{NEEDS[script]}")
    before = committed_results()
    extra = [a.format(tmp=tmp_path) for a in ARGS.get(script, [])]
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT / "src"),
        "VASWANI_BENCH_RESULTS": str(tmp_path / "results.jsonl"),
        "MPLBACKEND": "Agg",
    }
    run = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, f"{script} --quick failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert committed_results() == before, f"{script} --quick changed benchmarks/results"
