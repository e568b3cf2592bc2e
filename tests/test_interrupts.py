"""A second Ctrl-C never loses the run: real SIGINTs sent twice to a training process, during a
step (before and after the first checkpoint) and during a checkpoint's write. Afterwards the run
resumes, or is cleanly absent, no temporary folder is left, and the first Ctrl-C was answered
with what it does.

The moments are reached deterministically: the process runs the command line with its steps,
or its checkpoint's file writes, each preceded by a marker file and a pause, and the test
signals once it sees the marker.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.helpers import LineTask, tiny_lm_args, write_lm_text
from vaswani.config import TrainConfig
from vaswani.errors import RunDirError
from vaswani.training import signals
from vaswani.training.checkpoint import checkpoint_problem, list_checkpoints
from vaswani.training.trainer import Trainer, TrainingInterrupted

PAUSED = """
import sys, time
from pathlib import Path
from vaswani.training import checkpoint, trainer
marks, moment = Path(sys.argv[1]), sys.argv[2]
step, write = trainer.Trainer._step, checkpoint.write_file

def paused_step(self):
    if moment == "step":
        (marks / f"step-{self.state.step + 1}").touch()
        time.sleep(0.5)
    return step(self)

def paused_write(path, data):
    if moment == "write":
        (marks / f"write-{path.parent.name}-{path.name}").touch()
        time.sleep(0.5)
    write(path, data)

trainer.Trainer._step, checkpoint.write_file = paused_step, paused_write
from vaswani.cli import main
sys.exit(main(sys.argv[3:]))
"""
NOTICE = "vaswani: finishing step {} and saving; press Ctrl-C again to stop without saving"


def interrupted_twice(tmp_path: Path, moment: str, mark: str, *extra: str) -> tuple[Path, list[str]]:
    """Train a tiny lm paused at each ``moment`` (``step`` or ``write``), send SIGINT twice once
    the marker ``mark`` appears; the run and the lines of standard error, exit status 130."""
    marks = tmp_path / "marks"
    marks.mkdir()
    run = tmp_path / "run"
    args = tiny_lm_args(write_lm_text(tmp_path / "train.txt", lines=60), run, "--max-steps", "50", *extra)
    proc = subprocess.Popen(
        [sys.executable, "-c", PAUSED, str(marks), moment, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (marks / mark).exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err, err
    assert not list(tmp_path.rglob(".tmp*")), "a temporary file or folder was left behind"
    return run, err.strip().splitlines()


def resumes(run: Path, steps: int) -> None:
    from vaswani.cli import main

    assert main(["train", "lm", "--resume", str(run), "--max-steps", str(steps), "--quiet"]) == 0
    assert json.loads((run / "metrics.json").read_text())["steps"] == steps


@pytest.mark.slow
def test_twice_during_the_first_step_leaves_no_run(tmp_path):
    run, lines = interrupted_twice(tmp_path, "step", "step-1", "--checkpoint-every", "1000")
    assert lines == [
        NOTICE.format(1),
        f"vaswani: note: removed {run}: it had no checkpoint to resume from",
        "vaswani: interrupted",
    ]
    assert not run.exists()


@pytest.mark.slow
def test_twice_during_a_later_step_keeps_the_last_checkpoint(tmp_path):
    run, lines = interrupted_twice(tmp_path, "step", "step-4", "--checkpoint-every", "1")
    assert lines == [
        NOTICE.format(4),
        f"vaswani: note: {run} keeps its checkpoints; continue with: vaswani train lm --resume {run}",
        "vaswani: interrupted",
    ]
    steps = [int(p.name.removeprefix("step_")) for p in list_checkpoints(run)]
    assert steps[-1] == 3
    assert checkpoint_problem(list_checkpoints(run)[-1]) is None
    resumes(run, 5)


@pytest.mark.slow
def test_twice_during_a_checkpoint_write_lets_the_write_finish(tmp_path):
    mark = "write-.tmp_step_00000002-model.safetensors"
    run, lines = interrupted_twice(tmp_path, "write", mark, "--checkpoint-every", "2")
    assert lines[0] == NOTICE.format(2)  # the signal came while step 2 was being saved
    assert lines[-1] == "vaswani: interrupted"
    newest = list_checkpoints(run)[-1]
    assert newest.name == "step_00000002"
    assert checkpoint_problem(newest) is None, "the second Ctrl-C cut the checkpoint's write"
    resumes(run, 4)


def test_a_stop_at_once_waits_for_the_end_of_an_uninterrupted_block():
    class Holder:
        stop_signal: int | None = signal.SIGINT

    done = []
    with signals.stop_requests(Holder()), pytest.raises(KeyboardInterrupt), signals.uninterrupted():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("finished")
    assert done == ["finished"]


def test_the_first_sigint_says_which_step_it_finishes(tmp_path, capfd):
    cfg = TrainConfig(max_steps=50, lr=0.01, warmup_steps=0, schedule="constant", eval_every=100)
    task = LineTask(on_call={3: lambda: os.kill(os.getpid(), signal.SIGINT)})
    torch.manual_seed(0)
    with pytest.raises(TrainingInterrupted, match="stopped by SIGINT at step 3"):
        Trainer(torch.nn.Linear(3, 3), task, cfg, tmp_path).fit(quiet=True)
    assert capfd.readouterr().err == NOTICE.format(3) + "\n"


def test_a_run_directory_removed_during_training_is_not_recreated(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    task = LineTask(on_call={2: lambda: shutil.rmtree(run)})
    cfg = TrainConfig(max_steps=5, lr=0.01, warmup_steps=0, schedule="constant", eval_every=100)
    with pytest.raises(RunDirError, match="the run directory was removed during training"):
        Trainer(torch.nn.Linear(3, 3), task, cfg.replace(checkpoint_every=2), run).fit(quiet=True)
    assert not run.exists()
