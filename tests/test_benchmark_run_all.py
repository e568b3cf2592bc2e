"""``benchmarks/run_all.py`` end to end on one quick job: the results its child recorded reach the table
with their ratios oriented (above 1 is ours ahead, for rates and for sizes), targets judged, the job's
status and memory listed, and the sections of other machines kept when the file is written again."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OTHER_MACHINE = "## CPU: Some Other CPU; flags: amx_bf16\n\nan older section, kept as it is\n\n"


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def number(cell: str) -> float:
    return float(cell.split(":")[-1].replace(",", "").strip("* "))


def test_one_job_into_a_table_that_keeps_other_machines(tmp_path: Path) -> None:
    output = tmp_path / "performance.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--only", "local"]
    command += ["--output", str(output), "--threads", "1"]
    output.write_text("# Performance\n\nintro\n\n" + OTHER_MACHINE, encoding="utf-8")
    for _ in range(2):  # the second run replaces its own section and keeps the other machine's
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=240)
        assert done.returncode == 0, done.stderr
    text = output.read_text(encoding="utf-8")
    assert text.startswith("# Performance\n\nintro\n\n") and OTHER_MACHINE in text
    ours = re.findall(r"(?m)^## CPU: .*$", text)
    assert len(ours) == 2 and ours.count(ours[-1]) == 1 and "Some Other CPU" in ours[0]
    rows = [cells(x) for x in text.splitlines() if x.startswith("| local attention | attention")]
    assert len(rows) == 8  # 2 windows × (full, masked) × (time, memory)
    for row in rows:
        ours_value, other_value, ratio = number(row[3]), number(row[4]), number(row[5])
        expected = other_value / ours_value if "lower is better" in row[1] else ours_value / other_value
        assert abs(ratio - expected) <= 0.01 * expected + 0.01
        assert row[7] == ">= 4" and row[8] == ("yes" if ratio >= 4 else "**no**")
    job = next(cells(x) for x in text.splitlines() if x.startswith("| local attention | 1 | 0 |"))
    assert number(job[4]) > 0  # peak RSS in MiB


def test_a_new_table_gets_the_title_and_a_known_one_keeps_its_intro(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # run_all imports timing as its script does
    from benchmarks.run_all import TITLE, merged

    section = "## CPU: X\n\nrows\n"
    fresh = merged("", "CPU: X", section)
    assert fresh.startswith(f"{TITLE}\n\n") and fresh.endswith(section + "\n")
    assert merged(fresh, "CPU: X", "## CPU: X\n\nnew rows\n") == fresh.replace("rows", "new rows")


def test_a_run_of_some_jobs_keeps_the_rows_of_the_others(monkeypatch) -> None:
    """``--only``: the section's rows of the jobs not run stay as they were, every job in the order
    of the jobs' list; the rows of the jobs run are the new ones."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    from benchmarks.run_all import JOBS, Outcome, earlier_rows, section

    gpt, local = (next(j for j in JOBS if j.name == name) for name in ("gpt", "local attention"))
    result = {"benchmark": "passes/s", "precision": "fp32", "ours": [2.0], "other": [1.0],
              "ours_name": "a", "other_name": "b", "target": ">= 1"}  # fmt: skip
    old = section(
        [Outcome(gpt, 0, 5.0, 10.0, [result]), Outcome(local, 0, 7.0, 20.0, [result])], "CPU: X", 2, False
    )
    kept = earlier_rows(old, "CPU: X", {"local attention"})
    assert set(kept) == {"gpt"} and len(kept["gpt"]) == 2  # its result and its job line
    rerun = section(
        [Outcome(local, 0, 9.0, 30.0, [{**result, "ours": [3.0]}])], "CPU: X", 2, False, "local", kept
    )
    lines = rerun.splitlines()
    assert "--only local" in lines[2] and "the run before" in lines[2]
    assert [x for x in lines if x.startswith("| gpt |")] == kept["gpt"]
    local_rows = [x for x in lines if x.startswith("| local attention |")]
    assert len(local_rows) == 2 and "**3.00**" in local_rows[0] and "| 9 |" in local_rows[1]
    assert lines.index(kept["gpt"][0]) < lines.index(local_rows[0])  # the jobs' order: gpt first
    assert lines.index(kept["gpt"][1]) < lines.index(local_rows[1])
