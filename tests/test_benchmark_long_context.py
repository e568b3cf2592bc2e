"""``benchmarks/long_context.py --quick`` runs end to end: every path measured, the table, the
target lines and the plot."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_run_prints_the_table_and_writes_the_plot(tmp_path: Path) -> None:
    png = tmp_path / "plot.png"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, str(ROOT / "benchmarks" / "long_context.py"), "--quick", "--repeats", "1"]
    done = subprocess.run([*command, "--png", str(png)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| L |"))
    assert all(name in header for name in ("full s", "masked w=16 s", "local w=32 MiB"))
    assert sum(line.startswith("| 256 |") for line in lines) == 1
    assert sum("target >= 4x" in line for line in lines) == 4
    assert png.stat().st_size > 0
