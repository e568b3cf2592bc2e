"""Nothing lost: training killed, stopped, out of space, with a damaged checkpoint or a
diverging loss resumes exactly or stops with one clear line.

The subprocess tests train a real run with ``--deterministic`` and compare the final
``model.safetensors`` byte for byte with an uninterrupted run of the same length.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.helpers import LineTask, load_checkpoint, save_checkpoint, tiny_args, write_reverse_task
from vaswani.config import TrainConfig
from vaswani.errors import ConfigError, RunDirError, VaswaniError
from vaswani.io import load_weights
from vaswani.runtime import seed_everything
from vaswani.training import checkpoint
from vaswani.training.checkpoint import checkpoint_problem, list_checkpoints, newest_intact_checkpoint
from vaswani.training.optimizer import make_optimizer
from vaswani.training.trainer import Trainer, TrainingInterrupted

STEPS = 60
# Dropout makes the result depend on the restored torch RNG state, not only on the weights.
FLAGS = ("--deterministic", "--dropout", "0.1", "--checkpoint-every", "2")

# Runs the command line with every file write followed by a pause, so that a test can kill
# the process while a checkpoint is half written.
SLOW_WRITES = """
import sys, time
from vaswani.training import checkpoint
write = checkpoint.write_file
checkpoint.write_file = lambda path, data: (write(path, data), time.sleep(0.3))
from vaswani.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _popen(cwd: Path, *args: str, slow_writes: bool = False) -> subprocess.Popen[str]:
    program = ["-c", SLOW_WRITES] if slow_writes else ["-m", "vaswani.cli"]
    return subprocess.Popen(
        [sys.executable, *program, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _finish(proc: subprocess.Popen[str], status: int = 0) -> str:
    """Wait for the process; check its exit status; return its stderr."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, (proc.returncode, out, err)
    return err


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.communicate(timeout=30)


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while not condition():
        assert proc.poll() is None, f"the run ended first: {proc.communicate()}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _steps(run: Path) -> list[int]:
    return [int(p.name.removeprefix("step_")) for p in list_checkpoints(run)]


def _resume(run: Path, *extra: str) -> list[str]:
    return ["train", "translation", "--resume", str(run), "--quiet", *extra]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    return write_reverse_task(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory) -> Iterator[Callable[[], bytes]]:
    """The weights of an uninterrupted run of STEPS steps, trained in the background while the
    tests that compare against it interrupt their own."""
    folder = tmp_path_factory.mktemp("reference")
    proc = _popen(folder, *tiny_args(*data, folder / "run"), *FLAGS, "--max-steps", str(STEPS))

    @functools.cache
    def weights() -> bytes:
        _finish(proc)
        return (folder / "run" / "model.safetensors").read_bytes()

    yield weights
    if proc.poll() is None:
        _kill(proc)


@pytest.fixture
def start(tmp_path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start ``vaswani`` in a subprocess; whatever still runs at the end is killed."""
    procs: list[subprocess.Popen[str]] = []

    def run(*args: str, slow_writes: bool = False) -> subprocess.Popen[str]:
        procs.append(_popen(tmp_path, *args, slow_writes=slow_writes))
        return procs[-1]

    yield run
    for proc in procs:
        if proc.poll() is None:
            _kill(proc)


@pytest.mark.slow
def test_killed_at_any_moment_then_resumed_ends_bit_identical(data, reference, start, tmp_path):
    run = tmp_path / "run"
    # Killed as soon as the first checkpoint exists.
    proc = start(*tiny_args(*data, run), *FLAGS, "--max-steps", str(STEPS))
    _wait_for(lambda: bool(_steps(run)), proc)
    _kill(proc)
    # Killed at a random moment after the resumed run's first checkpoint.
    first, delay = max(_steps(run)), random.uniform(0.0, 0.4)
    proc = start(*_resume(run))
    _wait_for(lambda: max(_steps(run)) > first, proc)
    time.sleep(delay)
    _kill(proc)

    # Killed while its second checkpoint is half written (the first file in the temporary folder);
    # the first one cleans up what an earlier kill may have left.
    writing = run / "checkpoints" / f".tmp_step_{max(_steps(run)) + 4:08d}"

    def half_written() -> bool:
        try:
            return any(writing.iterdir())
        except FileNotFoundError:
            return False

    proc = start(*_resume(run), slow_writes=True)
    _wait_for(half_written, proc)
    _kill(proc)
    assert half_written()

    err = _finish(start(*_resume(run)))
    assert "warning" not in err, err
    assert (run / "model.safetensors").read_bytes() == reference(), f"killed {delay:.2f} s after a checkpoint"
    assert max(_steps(run)) == STEPS
    assert not list(run.glob("checkpoints/.tmp_*")), "a temporary folder was left behind"


@pytest.mark.slow
def test_a_truncated_checkpoint_is_reported_and_the_previous_one_used(data, reference, start, tmp_path):
    run = tmp_path / "run"
    _finish(start(*tiny_args(*data, run), *FLAGS, "--max-steps", str(STEPS // 2)))
    newest = list_checkpoints(run)[-1]
    weights = newest / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])

    err = _finish(start(*_resume(run, "--max-steps", str(STEPS))))
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert len(warnings) == 1, err
    assert str(newest) in warnings[0] and "model.safetensors" in warnings[0] and "truncated" in warnings[0]
    assert (run / "model.safetensors").read_bytes() == reference()


@pytest.mark.slow
def test_sigterm_finishes_the_step_writes_a_checkpoint_and_says_how_to_resume(data, start, tmp_path):
    run = tmp_path / "run"
    proc = start(*tiny_args(*data, run), *FLAGS, "--max-steps", "10000")
    _wait_for(lambda: bool(_steps(run)), proc)
    time.sleep(random.uniform(0.0, 0.2))
    proc.send_signal(signal.SIGTERM)
    lines = _finish(proc, status=128 + signal.SIGTERM).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("vaswani: stopped by SIGTERM at step ")
    assert lines[0].endswith(f"continue with: vaswani train translation --resume {run}")
    found = re.search(r"at step (\d+)", lines[0])
    assert found is not None
    step = int(found.group(1))
    assert max(_steps(run)) == step
    assert checkpoint_problem(run / "checkpoints" / f"step_{step:08d}") is None

    _finish(start(*_resume(run, "--max-steps", str(step + 3))))
    assert json.loads((run / "metrics.json").read_text())["steps"] == step + 3


def _trainer(folder: Path, task: LineTask, **changes) -> Trainer:
    cfg = TrainConfig(
        max_steps=6, lr=0.01, warmup_steps=0, schedule="constant", clip_norm=None, checkpoint_every=1,
        eval_every=100, max_bad_steps=3,
    ).replace(**changes)  # fmt: skip
    torch.manual_seed(0)
    return Trainer(torch.nn.Linear(3, 3), task, cfg, folder)


def test_non_finite_steps_are_skipped_counted_and_stop_training(tmp_path, capsys):
    # calls: 1 good, 2 NaN loss, 3 and 4 good, then 5, 6, 7 bad in a row.
    task = LineTask(nan_loss=frozenset({2, 6}), nan_grad=frozenset({5, 7}))
    trainer = _trainer(tmp_path, task)
    with pytest.raises(VaswaniError) as info:
        trainer.fit(quiet=True)
    message = str(info.value)
    assert "3 steps in a row had a non-finite loss or gradient" in message
    assert "stopping at step 3" in message and "\n" not in message
    skipped = [line for line in capsys.readouterr().out.splitlines() if "update skipped" in line]
    assert len(skipped) == 4
    assert skipped[-1].endswith("(3 in a row, 4 in all)")
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())
    assert _steps(tmp_path) == [1, 2, 3]
    last = list_checkpoints(tmp_path)[-1]
    assert json.loads((last / "trainer_state.json").read_text())["skipped_steps"] == 1
    saved = _trainer(tmp_path, LineTask()).model
    load_weights(saved, last / "model.safetensors")
    for a, b in zip(saved.parameters(), trainer.model.parameters(), strict=True):
        assert torch.equal(a, b), "a skipped step changed the weights"


def test_sigint_finishes_the_step_writes_a_checkpoint_and_restores_the_handlers(tmp_path):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    task = LineTask(on_call={3: lambda: os.kill(os.getpid(), signal.SIGINT)})
    trainer = _trainer(tmp_path, task, checkpoint_every=None, max_steps=100)
    with pytest.raises(TrainingInterrupted) as info:
        trainer.fit(quiet=True)
    assert info.value.exit_status == 130
    assert str(info.value).startswith("stopped by SIGINT at step 3;")
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert _steps(tmp_path) == [3]
    assert checkpoint_problem(tmp_path / "checkpoints" / "step_00000003") is None


def test_a_second_signal_stops_at_once(tmp_path):
    def twice() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    trainer = _trainer(tmp_path, LineTask(on_call={3: twice}), checkpoint_every=None, max_steps=100)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit(quiet=True)
    assert _steps(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_full_disk_keeps_the_previous_checkpoint_and_leaves_no_temporary_folder(tmp_path, monkeypatch):
    write = checkpoint.write_file

    def full_at_step_2(path: Path, data: bytes) -> None:
        if path.parent.name == ".tmp_step_00000002" and path.name == "optimizer.pt":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write(path, data)

    monkeypatch.setattr(checkpoint, "write_file", full_at_step_2)
    with pytest.raises(VaswaniError) as info:
        _trainer(tmp_path, LineTask(), keep_checkpoints=1).fit(quiet=True)
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / "checkpoints" / "step_00000002") in message
    assert "no space left on device" in message
    assert not list(tmp_path.glob("checkpoints/.tmp_*"))
    assert _steps(tmp_path) == [1]
    assert checkpoint_problem(list_checkpoints(tmp_path)[0]) is None
    fresh = _trainer(tmp_path, LineTask())
    assert load_checkpoint(list_checkpoints(tmp_path)[0], fresh.model, fresh.optimizer)["step"] == 1


def test_damaged_checkpoints_are_reported_in_one_line_each_and_skipped(tmp_path, capsys):
    _trainer(tmp_path, LineTask(), max_steps=3).fit(quiet=True)
    first, second, third = list_checkpoints(tmp_path)
    optimizer = third / "optimizer.pt"
    flipped = bytearray(optimizer.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF
    optimizer.write_bytes(bytes(flipped))
    capsys.readouterr()
    assert newest_intact_checkpoint(tmp_path) == second
    warning = capsys.readouterr().err.splitlines()
    assert len(warning) == 1
    assert str(third) in warning[0] and "optimizer.pt" in warning[0] and "checksum" in warning[0]

    (second / "manifest.json").unlink()
    (first / "trainer_state.json").write_text("{")
    with pytest.raises(RunDirError) as info:
        newest_intact_checkpoint(tmp_path)
    assert "no intact checkpoint to resume from (3 damaged" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_checkpoint_restores_the_python_numpy_and_torch_generators(tmp_path):
    model = torch.nn.Linear(2, 2)
    optimizer = make_optimizer(model, TrainConfig())
    seed_everything(5)
    path = save_checkpoint(tmp_path, model, optimizer, {"step": 1}, keep=1)
    expected = random.random(), float(np.random.rand()), float(torch.rand(1))
    seed_everything(6)
    load_checkpoint(path, model, optimizer)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected


def test_a_deterministic_run_uses_one_thread():
    with pytest.raises(ConfigError, match=r"train\.threads"):
        TrainConfig(deterministic=True, threads=2)


def test_pruning_leaves_what_it_did_not_write_and_goes_on(tmp_path, capsys):
    """A link or a stray file in checkpoints/ is never listed, pruned or followed, and training goes
    on: a link at the trainer's temporary name is unlinked with a warning, a link named like a
    checkpoint is left alone, and the target outside the run is untouched."""
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "step_00000000").symlink_to(outside, target_is_directory=True)
    (run / "checkpoints" / ".tmp_step_00000001").symlink_to(outside, target_is_directory=True)
    (run / "checkpoints" / "notes.txt").write_text("a note")
    for step in (1, 2, 3):
        save_checkpoint(run, model, optimizer, {"step": step}, keep=1)
    assert [p.name for p in list_checkpoints(run)] == ["step_00000003"]
    assert (outside / "keep.txt").read_text() == "mine"
    assert (run / "checkpoints" / "step_00000000").is_symlink()
    assert (run / "checkpoints" / "notes.txt").read_text() == "a note"
    assert "unlinked" in capsys.readouterr().err and not (run / "checkpoints" / ".tmp_step_00000001").exists()
