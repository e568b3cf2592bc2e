"""Run directories are locked: one process writes a run at a time (train, resume, average), a
second writer gets one line naming the holder and touches nothing, the lock of a killed process
is taken over, and read-only commands work while a run is held.

``flock`` locks belong to an open file, not to a process: a lock the test takes is refused to a
command run in the same process, so the quick tests hold a run themselves; the slow ones race
real processes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import tiny_lm_args, tiny_lm_run, write_lm_text
from vaswani.cli import main
from vaswani.errors import RunDirError, VaswaniError
from vaswani.rundir import RunDir
from vaswani.tasks import lifecycle, registry
from vaswani.training.checkpoint import list_checkpoints

HOLD = """
import sys, time
from vaswani.rundir import RunDir
lock = RunDir(sys.argv[1]).lock("vaswani train lm --out held")
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny language model, 20 steps, a checkpoint every 5."""
    folder = tmp_path_factory.mktemp("locking")
    return tiny_lm_run(folder, "--max-steps", "20", "--checkpoint-every", "5", "--keep-checkpoints", "4")


def snapshot(folder: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.rglob("*")}


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "lm", "--resume", "{run}", "--max-steps", "30", "--quiet"],
        ["average", "{run}", "--last", "2"],
        ["average", "{run}", "--last", "2", "--out", "{run}/averaged.safetensors"],
    ],
    ids=["resume", "average", "average-out"],
)
def test_a_second_writer_is_refused_in_one_line_and_touches_nothing(run, argv, capsys):
    before = snapshot(run)
    with RunDir(run).lock("vaswani train lm --out somewhere"):
        assert main([a.format(run=run) for a in argv]) == 2
    line = one_line(capsys)
    assert line == (
        f"vaswani: error: {run}: in use by process {os.getpid()} (vaswani train lm --out somewhere); "
        "wait until it ends, or stop it"
    )
    assert snapshot(run) == before
    assert not (run / ".lock").exists(), "the lock file outlived its holder"


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "lm", "--resume", "{run}", "--max-steps", "30", "--quiet"],
        ["average", "{run}", "--last", "1"],
    ],
    ids=["resume", "average"],
)
def test_a_lock_planted_as_a_link_is_refused_and_its_target_untouched(run, argv, tmp_path, capsys):
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".lock"))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (copy / ".lock").symlink_to(victim)
    before = snapshot(copy)
    assert main([a.format(run=copy) for a in argv]) == 2
    assert one_line(capsys) == (
        f"vaswani: error: {copy / '.lock'}: a symbolic link; vaswani writes no file of a run through a "
        "link (remove it)"
    )
    assert victim.read_text() == "precious\n" and snapshot(copy) == before


def test_a_new_run_in_an_empty_folder_that_is_held_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    text = write_lm_text(tmp_path / "train.txt", lines=40)
    with RunDir(out).lock():
        assert main(tiny_lm_args(text, out)) == 2
        assert f"in use by process {os.getpid()}" in one_line(capsys)
        assert [p.name for p in out.iterdir()] == [".lock"]
    assert not any(out.iterdir())


def test_read_only_commands_take_no_lock(run, capsys):
    with RunDir(run).lock():
        assert main(["generate", str(run), "the cat", "--max-new-tokens", "3"]) == 0
        assert main(["evaluate", str(run), "--text", str(run.parent / "train.txt")]) == 0
        assert main(["plot", str(run), "--out", str(run.parent / "curves.png")]) == 0
    assert "perplexity" in capsys.readouterr().out


def test_create_makes_the_folder_once_and_lets_go(tmp_path):
    out = tmp_path / "a" / "b"
    folder, lock = RunDir.create(out, "lm")
    assert folder.path == out and lock.made == tmp_path / "a"
    assert (out / ".lock").read_text().startswith(f"{os.getpid()}\n")
    with pytest.raises(RunDirError, match="in use by process"):
        RunDir.create(out, "lm")
    assert folder.remove_stub(lock)
    lock.release()
    assert not (tmp_path / "a").exists(), "a stub's folders stay behind"


def test_a_stub_with_a_checkpoint_is_kept(run):
    lock = RunDir(run).lock()
    try:
        assert not RunDir(run).remove_stub(lock)
    finally:
        lock.release()
    assert list_checkpoints(run)


@pytest.mark.slow
def test_the_lock_of_a_killed_process_is_taken_over(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n", proc.stderr
        with pytest.raises(RunDirError) as info:
            RunDir(tmp_path).lock()
        assert f"in use by process {proc.pid} (vaswani train lm --out held)" in str(info.value)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert (tmp_path / ".lock").exists(), "a killed process cannot remove its lock file"
    with RunDir(tmp_path).lock() as lock:
        assert (tmp_path / ".lock").read_text().startswith(f"{os.getpid()}\n")
        assert lock.fd is not None


def _vaswani(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "vaswani", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _refused(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.slow
def test_while_a_run_trains_no_other_process_writes_it(tmp_path):
    text = write_lm_text(tmp_path / "train.txt", lines=60)
    out = tmp_path / "run"
    args = tiny_lm_args(text, out, "--max-steps", "100000", "--checkpoint-every", "2")
    args[args.index("--max-minutes") + 1] = "5"
    training = _vaswani(tmp_path, *args)
    try:
        _wait_for(lambda: bool(list_checkpoints(out)), training)
        holder = f"in use by process {training.pid} (vaswani train lm --text {text}"
        assert holder in _refused(_vaswani(tmp_path, *tiny_lm_args(text, out)))
        assert holder in _refused(_vaswani(tmp_path, "train", "lm", "--resume", str(out), "--max-steps", "9"))
        assert holder in _refused(_vaswani(tmp_path, "average", str(out), "--last", "1"))
        assert not (out / "model.before-average.safetensors").exists()
    finally:
        training.send_signal(signal.SIGKILL)
        training.communicate(timeout=30)
    step = max(int(p.name.removeprefix("step_")) for p in list_checkpoints(out))
    resumed = _vaswani(tmp_path, "train", "lm", "--resume", str(out), "--max-steps", str(step + 2), "--quiet")
    out_text, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, (out_text, err)
    assert json.loads((out / "metrics.json").read_text())["steps"] == step + 2
    assert not (out / ".lock").exists()


@pytest.mark.slow
def test_two_new_runs_racing_for_one_folder_leave_one_whole_run(tmp_path):
    text = write_lm_text(tmp_path / "train.txt", lines=60)
    out = tmp_path / "run"
    procs = {
        width: _vaswani(tmp_path, *tiny_lm_args(text, out, "--max-steps", "10", "--d-model", width))
        for width in ("32", "48")
    }
    results = {width: (proc.communicate(timeout=180), proc.returncode) for width, proc in procs.items()}
    codes = sorted(code for _, code in results.values())
    assert codes == [0, 2], results
    winner = next(width for width, (_, code) in results.items() if code == 0)
    (_, err), _ = next(result for result in results.values() if result[1] == 2)
    assert len(err.strip().splitlines()) == 1, err
    # the loser may look before the winner has written its pid into .lock: "in use by another process"
    assert "in use by " in err or "already exists and is not empty" in err
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["d_model"] == int(winner)
    registry.load(out, device="cpu")  # the weights fit the config: one run's files, not a mix


def test_a_new_run_that_fails_before_its_first_checkpoint_is_removed(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(VaswaniError, match="no data yet"), lifecycle.new_run(out, "lm", "cpu"):
        raise VaswaniError("no data yet")  # before training began: removed without a word
    assert not out.exists() and capsys.readouterr().err == ""
    with pytest.raises(VaswaniError) as info, lifecycle.new_run(out, "lm", "cpu") as (run_dir, _):
        (run_dir / "config.json").write_text("{}")
        raise VaswaniError("diverged")
    assert not out.exists()
    assert str(info.value) == f"diverged; removed {out}: it had no checkpoint to resume from"
    assert capsys.readouterr().err == ""


def test_a_new_run_that_fails_after_a_checkpoint_says_how_to_resume(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RunDirError) as info, lifecycle.new_run(out, "lm", "cpu") as (run_dir, _):
        (run_dir / "checkpoints" / "step_00000002").mkdir(parents=True)
        raise RunDirError("diverged")
    assert (out / "checkpoints" / "step_00000002").is_dir() and not (out / ".lock").exists()
    assert type(info.value) is RunDirError
    assert (
        str(info.value)
        == f"diverged; {out} keeps its checkpoints; continue with: vaswani train lm --resume {out}"
    )
