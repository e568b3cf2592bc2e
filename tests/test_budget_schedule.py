"""A time budget shapes the schedule: when ``max_minutes`` ends a run before ``max_steps``, the
warmup is planned from the pace of the first steps (the plan kept in the checkpoint, so a resumed
run keeps it) and the cosine decay follows the training time, so that the rate peaks early and
reaches its floor as the time runs out, also when the pace changes on the way or a resumed run
goes faster. The clock is the test's: fake seconds per step, never real time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.helpers import LineTask
from vaswani.config import TrainConfig
from vaswani.training import trainer as trainer_module
from vaswani.training.schedules import WARMUP_SHARE, budget_plan, learning_rate
from vaswani.training.trainer import Trainer

PEAK, FLOOR = 0.01, 0.001


def _config(**changes: object) -> TrainConfig:
    cfg = TrainConfig(
        max_steps=10_000, lr=PEAK, min_lr=FLOOR, warmup_steps=4000, schedule="cosine", eval_every=10**6,
        checkpoint_every=10, keep_checkpoints=100,
    )  # fmt: skip
    return cfg.replace(**changes)


def _rates(
    folder: Path,
    cfg: TrainConfig,
    monkeypatch: pytest.MonkeyPatch,
    seconds_per_step: float | Callable[[int], float] = 1.0,
    resume_from: Path | None = None,
) -> dict[int, float]:
    """Train to the end with a fake clock that moves ``seconds_per_step`` per loss computed (or
    stands at ``seconds_per_step(losses)``); the learning rate of each step, by step."""
    folder.mkdir(exist_ok=True)
    task = LineTask()
    at = seconds_per_step if callable(seconds_per_step) else lambda calls: calls * seconds_per_step
    clock: Callable[[], float] = lambda: at(task.calls)  # noqa: E731
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=clock))
    torch.manual_seed(0)
    trainer = Trainer(torch.nn.Linear(3, 3), task, cfg, folder, resume_from=resume_from)
    rates: dict[int, float] = {}
    trainer.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: rates.__setitem__(trainer.state.step + 1, opt.param_groups[0]["lr"])
    )
    trainer.fit(quiet=True)
    return rates


def test_a_budget_of_60_steps_peaks_in_its_first_tenth_and_ends_at_the_floor(tmp_path, monkeypatch):
    rates = _rates(tmp_path, _config(max_minutes=1.0), monkeypatch)  # 60 fake seconds, one a step
    assert sorted(rates) == list(range(1, 61))
    peak_step = max(rates, key=rates.__getitem__)
    assert rates[peak_step] == pytest.approx(PEAK)
    assert peak_step <= 6  # within 10% of the 60 budgeted steps (not at step 4000)
    assert rates[60] == pytest.approx(FLOOR)  # the decay ends as the time does
    assert all(rates[s + 1] <= rates[s] for s in range(peak_step, 60))
    saved = json.loads((tmp_path / "checkpoints" / "step_00000060" / "trainer_state.json").read_text())
    assert saved["schedule_plan"] == {
        "warmup": 6, "total": 60, "max_minutes": 1.0, "max_steps": 10_000, "warmup_steps": 4000,
        "decay_from": 6.0,
    }  # fmt: skip
    # At a steady pace the decay by time is the decay by steps planned from it.
    assert all(
        rates[s] == pytest.approx(learning_rate("cosine", s, PEAK, 6, 60, FLOOR)) for s in rates if s > 6
    )


@pytest.mark.parametrize("schedule", ["cosine", "inverse_sqrt", "constant"])
def test_without_a_time_budget_the_schedule_is_unchanged(tmp_path, monkeypatch, schedule):
    rates = _rates(tmp_path, _config(max_steps=11, warmup_steps=3, schedule=schedule), monkeypatch)
    assert [rates[s] for s in range(1, 12)] == [
        learning_rate(schedule, s, PEAK, 3, 11, FLOOR) for s in range(1, 12)
    ]
    if schedule == "cosine":  # the values main computes, written out: warmup to 3, half-way down at 7
        assert [round(rates[s], 12) for s in (1, 3, 7, 11)] == [0.003333333333, 0.01, 0.0055, 0.001]


def test_a_budget_that_outlasts_max_steps_keeps_the_schedule(tmp_path, monkeypatch):
    cfg = _config(max_steps=20, warmup_steps=8)
    assert _rates(tmp_path / "a", cfg.replace(max_minutes=10.0), monkeypatch) == _rates(
        tmp_path / "b", cfg, monkeypatch
    )


def test_a_resumed_budgeted_run_keeps_its_warmup_and_decays_over_the_time_left(tmp_path, monkeypatch):
    cfg = _config(max_minutes=1.0)
    whole = _rates(tmp_path / "whole", cfg, monkeypatch)
    # resumed from step 30 on a machine twice as fast: 30 seconds left are 60 steps, not 30
    resumed = _rates(
        tmp_path / "resumed",
        cfg,
        monkeypatch,
        0.5,
        resume_from=tmp_path / "whole" / "checkpoints" / "step_00000030",
    )
    assert sorted(resumed) == list(range(31, 91))
    assert resumed[31] == pytest.approx(whole[31], rel=0.05)  # on from where it was
    assert all(resumed[s + 1] <= resumed[s] for s in range(31, 90))
    assert resumed[90] == pytest.approx(FLOOR, rel=0.01)
    assert resumed[80] > FLOOR * 1.1  # not at the floor for the last third of the run


def test_a_run_whose_pace_changes_still_decays_to_the_end_of_its_budget(tmp_path, monkeypatch):
    """Two seconds a step while the plan is made (another job beside it), then one: a decay planned
    by steps would reach its floor after half the steps the run takes, then stay there."""
    rates = _rates(tmp_path, _config(max_minutes=1.0), monkeypatch, lambda calls: min(calls, 10) + calls)
    last = max(rates)
    assert last > 45  # 10 steps in the first 20 seconds, then one a second
    assert rates[last] == pytest.approx(FLOOR, rel=0.01)
    assert all(rates[s + 1] <= rates[s] for s in range(7, last))
    assert rates[last - 10] > FLOOR * 1.1


def test_budget_plan_caps_warmup_only_where_the_budget_ends_the_run():
    assert budget_plan(5, 1.0, 55.0, 10_000, 4000) == (6, 60)
    assert budget_plan(5, 1.0, 55.0, 10_000, 3) == (3, 60)  # a short warmup is kept
    assert budget_plan(5, 1.0, 5_000.0, 100, 4000) == (4000, 100)  # max_steps ends it: unchanged
    assert budget_plan(5, 10.0, 1.0, 10_000, 4000) == (1, 6)  # nothing left: ends at the next step
    assert WARMUP_SHARE == 0.1
