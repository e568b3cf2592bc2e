"""``benchmarks/jobs.py``: a job starts only once the jobs it names have finished, at most ``workers``
run at once, and a job that fails stops the schedule with its log named."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.jobs import Job, run_all


def _note(out: Path, name: str, seconds: float = 0.0) -> Job:
    """A job that appends 'start NAME' and, ``seconds`` later, 'end NAME' to out/order."""
    code = (
        "import sys, time\n"
        f"open({str(out / 'order')!r}, 'a').write('start {name}\\n')\n"
        f"time.sleep({seconds})\n"
        f"open({str(out / 'order')!r}, 'a').write('end {name}\\n')\n"
    )
    return Job(name, [], program=["-c", code])


def _order(out: Path) -> list[str]:
    return (out / "order").read_text(encoding="utf-8").split("\n")[:-1]


def test_a_job_waits_for_what_it_needs(tmp_path):
    first, slow, last = _note(tmp_path, "first"), _note(tmp_path, "slow", 0.3), _note(tmp_path, "last")
    last.after = ["first", "slow"]
    run_all([last, slow, first], tmp_path, workers=2)
    order = _order(tmp_path)
    assert order.index("start last") > max(order.index("end first"), order.index("end slow"))
    assert (tmp_path / "slow.log").is_file()


def test_no_more_than_workers_run_at_once(tmp_path):
    run_all([_note(tmp_path, f"job{i}", 0.2) for i in range(4)], tmp_path, workers=2)
    running, most = 0, 0
    for line in _order(tmp_path):
        running += 1 if line.startswith("start") else -1
        most = max(most, running)
    assert most <= 2 and len(_order(tmp_path)) == 8


def test_a_failed_job_names_its_log(tmp_path):
    with pytest.raises(SystemExit, match=r"broken failed \(exit 3\): see .*broken\.log"):
        run_all([Job("broken", [], program=["-c", "raise SystemExit(3)"])], tmp_path, workers=1)


def test_the_command_shown_is_vaswani_or_the_script():
    assert Job("a", ["train", "lm"]).command() == ["vaswani", "train", "lm"]
    script = Path(__file__).resolve()
    shown = Job("b", ["--x"], program=[str(script)]).command()
    assert shown == ["python", "tests/test_benchmark_jobs.py", "--x"]
