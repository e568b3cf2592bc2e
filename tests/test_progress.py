"""The trainer's progress display: it counts toward the step that will end the run, prints plain
lines (no carriage returns) where the output is not a terminal, and says, when a time budget
stopped training far short of ``max_steps``, how to train on."""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.helpers import (
    LineTask,
    tiny_args,
    tiny_classify_args,
    tiny_lm_args,
    tiny_mlm_args,
    write_lm_text,
    write_repeated_text,
    write_reverse_task,
    write_sentiment,
)
from vaswani.cli import main
from vaswani.config import TrainConfig
from vaswani.data.grammar import generate_pairs
from vaswani.training import progress
from vaswani.training.progress import Progress, expected_end
from vaswani.training.trainer import Trainer

PLAIN_LINE = re.compile(
    r"step (\d+)/(\d+)  loss \d+\.\d{3}  lr \d\.\d\de[-+]\d\d  tokens/s [\d,]+  "
    r"elapsed \d+:\d\d  eta \d+:\d\d"
)


def _trainer(folder: Path, **changes: object) -> Trainer:
    cfg = TrainConfig(
        max_steps=12, lr=0.01, warmup_steps=0, schedule="constant", checkpoint_every=None, eval_every=100,
    ).replace(**changes)  # fmt: skip
    torch.manual_seed(0)
    return Trainer(torch.nn.Linear(3, 3), LineTask(), cfg, folder, "translation")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_expected_end_is_the_step_limit_or_where_the_time_budget_runs_out():
    assert expected_end(10, 1.0, 100_000, None) == 100_000
    assert expected_end(0, 0.0, 100_000, 60.0) == 100_000  # no pace yet
    assert expected_end(10, 1.0, 100_000, 60.0) == 600  # 10 steps a second for 60 seconds
    assert expected_end(10, 1.0, 300, 60.0) == 300  # max_steps comes first
    assert expected_end(10, 61.0, 100_000, 60.0) == 10  # the budget is spent


def test_on_a_terminal_the_bar_counts_toward_the_end_the_budget_predicts():
    terminal = _Terminal()
    with Progress(100_000, 60.0, 0, stream=terminal) as shown:
        shown.update(10, 1.0, 2.5, 1e-3, 1000.0)
        latest = terminal.getvalue().split("\r")[-1]
    assert " 10/600 " in latest, latest
    assert "100000" not in terminal.getvalue()


def test_a_plain_line_gives_the_end_and_the_eta_the_pace_predicts(monkeypatch):
    clock = iter([100.0, 110.0])  # the display starts at 100 s; step 10 ends at 110 s
    monkeypatch.setattr(progress, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    log = io.StringIO()
    with Progress(100_000, 60.0, 0, stream=log) as shown:
        shown.update(10, 10.0, 2.5, 1e-3, 1234.5)
    # 1 step a second for a budget of 60 seconds: the run ends at step 60, 50 seconds from now.
    assert log.getvalue() == ("step 10/60  loss 2.500  lr 1.00e-03  tokens/s 1,234  elapsed 0:10  eta 0:50\n")


def test_output_that_is_not_a_terminal_gets_plain_lines_and_no_carriage_returns(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(progress, "LINE_SECONDS", 0.0)  # a line after every step
    _trainer(tmp_path).fit()
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert [PLAIN_LINE.fullmatch(line) is not None for line in lines] == [True] * 12, err
    assert [int(PLAIN_LINE.fullmatch(line)[1]) for line in lines] == list(range(1, 13))
    assert lines[-1].startswith("step 12/12 ")


def test_plain_lines_come_every_few_seconds_and_once_at_the_end(tmp_path, capsys):
    _trainer(tmp_path).fit()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("step 12/12 "), lines


def test_quiet_shows_no_progress(tmp_path, capsys):
    _trainer(tmp_path).fit(quiet=True)
    assert capsys.readouterr().err == ""


def test_a_time_budget_that_stops_training_short_says_so_and_how_to_train_on(tmp_path, capsys):
    metrics = _trainer(tmp_path, max_steps=10**9, max_minutes=0.002).fit(quiet=True)
    out = capsys.readouterr().out.splitlines()
    steps = metrics["steps"]
    assert out[-2].startswith(
        f"training stopped at step {steps} of 1000000000 (max_steps): the time budget of 0.002 minutes "
        "ran out. To train on to step 1000000000 (about "
    )
    command = shlex.split(out[-1])
    resume = ["vaswani", "train", "translation", "--resume", str(tmp_path)]
    assert command[:8] == [*resume, "--max-steps", "1000000000", "--max-minutes"]
    assert int(command[8]) == pytest.approx(1.25 * metrics["train_seconds"] / 60 * 10**9 / steps, rel=0.05)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert set(saved) == {"train_seconds", "steps", "skipped_steps", "tokens_per_second", "processes"}


@pytest.mark.parametrize("budget", [None, 10.0])
def test_no_closing_note_when_training_reaches_max_steps(tmp_path, capsys, budget):
    _trainer(tmp_path, max_minutes=budget).fit(quiet=True)
    assert "training stopped" not in capsys.readouterr().out


@pytest.mark.slow
def test_the_printed_command_trains_on_to_max_steps(tmp_path, capsys):
    src, tgt = write_reverse_task(tmp_path)
    run = tmp_path / "run"
    args = tiny_args(src, tgt, run, "--max-steps", "400", "--max-minutes", "0.005", "--eval-every", "100000")
    assert main(args) == 0
    stopped = json.loads((run / "metrics.json").read_text())["steps"]
    assert stopped < 360
    command = shlex.split(capsys.readouterr().out.split("To train on to step 400")[1].splitlines()[1])
    assert command[:5] == ["vaswani", "train", "translation", "--resume", str(run)]
    assert main([*command[1:], "--quiet"]) == 0
    assert json.loads((run / "metrics.json").read_text())["steps"] == 400


def test_data_preparation_shows_each_stage_in_a_log_and_counts_on_a_terminal():
    log = io.StringIO()
    with progress.Stage("generating 3,000 sentence pairs", 3000, stream=log) as shown:
        pairs = generate_pairs(3000, progress=shown)
    assert len(pairs) == 3000
    first, last = log.getvalue().splitlines()
    assert first == "generating 3,000 sentence pairs…"
    assert re.fullmatch(r"generating 3,000 sentence pairs: done in \d+:\d\d", last)
    terminal = _Terminal()
    counts: list[int] = []
    with progress.Stage("generating", 3000, stream=terminal) as shown:
        generate_pairs(3000, progress=lambda n: (counts.append(n), shown(n)))
        assert shown.bar is not None and shown.bar.n == 3000
    assert counts == [1000, 2000, 3000]
    assert "3000/3000" in terminal.getvalue()
    quiet = io.StringIO()
    with progress.Stage("generating", 10, quiet=True, stream=quiet):
        pass
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("task", ["lm", "mlm", "classify"])
def test_tokenizer_training_shows_a_line_as_it_starts_and_ends(task, tmp_path, capsys):
    """Not quiet, every task that trains a tokenizer says so on standard error (no silent minute)."""
    if task == "lm":
        args = tiny_lm_args(write_lm_text(tmp_path / "t.txt"), tmp_path / "run", "--tokenizer", "bpe")
        kind = "bpe"
    elif task == "mlm":
        args, kind = tiny_mlm_args(write_repeated_text(tmp_path / "t.txt"), tmp_path / "run"), "WordPiece"
    else:
        train, dev = write_sentiment(tmp_path, "train", 40, 0), write_sentiment(tmp_path, "dev", 10, 1)
        args, kind = tiny_classify_args(train, dev, tmp_path / "run"), "WordPiece"
    args = [a for a in args if a != "--quiet"]
    assert main([*args, "--max-steps", "2"]) == 0  # the last --max-steps given wins
    err = capsys.readouterr().err.splitlines()
    started = [line for line in err if line.startswith(f"training a {kind} tokenizer on ")]
    assert started and started[0].endswith("…"), err
    assert any(re.fullmatch(rf"training a {kind} tokenizer on [\d,]+ \w+: done in \d+:\d\d", x) for x in err)
