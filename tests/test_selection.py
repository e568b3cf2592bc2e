"""``train.select_by``: the trainer keeps the best weights by a validation metric beside the last
(ties to the newer, a loss downwards, a non-finite value never), ``translate`` and ``evaluate``
use them and say which, ``export-hf`` (and so ``export-ctranslate2``) writes them, and an old run
directory without them keeps using its last weights."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.helpers import LineTask, copied_run
from vaswani.cli import main
from vaswani.config import TrainConfig
from vaswani.errors import ConfigError
from vaswani.io import safetensors_metadata
from vaswani.rundir import RunDir
from vaswani.training.averaging import average_checkpoints
from vaswani.training.checkpoint import list_checkpoints
from vaswani.training.selection import chosen_weights, improves
from vaswani.training.trainer import Trainer


def test_improves_ties_to_the_newer_loss_downwards_and_never_a_non_finite_value():
    assert improves("bleu", {"valid_bleu": 20.0}, {})
    assert improves("bleu", {"valid_bleu": 20.0}, {"valid_bleu": 20.0, "step": 1})
    assert not improves("chrf", {"valid_chrf": 19.0}, {"valid_chrf": 20.0, "step": 1})
    assert improves("loss", {"valid_loss": 1.0}, {"valid_loss": 2.0, "step": 1})
    assert not improves("loss", {"valid_loss": 3.0}, {"valid_loss": 2.0, "step": 1})
    assert not improves("loss", {"valid_loss": math.nan}, {})
    with pytest.raises(ConfigError, match=r"^config field 'train.select_by': 'bleu' needs .* valid_loss\)$"):
        improves("bleu", {"valid_loss": 1.0}, {})


class ScoredTask(LineTask):
    """LineTask whose evaluations report the BLEU values of ``scores`` in turn."""

    def __init__(self, scores: list[float]) -> None:
        super().__init__()
        self.scores = iter(scores)

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        return {"valid_bleu": next(self.scores)}


def test_the_best_weights_are_those_of_the_best_evaluation(tmp_path):
    cfg = TrainConfig(
        max_steps=4, lr=0.01, warmup_steps=0, schedule="constant", clip_norm=None, checkpoint_every=1,
        keep_checkpoints=4, eval_every=1, select_by="bleu",
    )  # fmt: skip
    torch.manual_seed(0)
    Trainer(torch.nn.Linear(3, 3), ScoredTask([10.0, 30.0, 30.0, 20.0]), cfg, tmp_path).fit(quiet=True)
    best = tmp_path / RunDir.BEST
    assert safetensors_metadata(best) == {
        "select_by": "bleu", "metric": "valid_bleu", "value": "30.0", "step": "3"
    }  # fmt: skip
    step_3 = load_file(list_checkpoints(tmp_path)[2] / "model.safetensors")
    assert all(torch.equal(t, step_3[k]) for k, t in load_file(best).items())
    last = load_file(tmp_path / RunDir.WEIGHTS)
    assert not torch.equal(last["weight"], step_3["weight"])


def test_an_old_run_uses_its_last_weights_and_says_so(tmp_path, capsys):
    run, _ = copied_run("translation", tmp_path)
    assert chosen_weights(RunDir(run), None)[0] == run / RunDir.WEIGHTS
    capsys.readouterr()
    assert main(["translate", str(run), "a b c"]) == 0
    assert capsys.readouterr().err == "vaswani: weights: model.safetensors (the last; no train.select_by)\n"


def test_a_run_without_its_best_file_yet_uses_the_last(tmp_path: Path):
    folder = RunDir(tmp_path)
    path, note = chosen_weights(folder, "bleu")
    assert (
        path == folder.weights
        and note == "weights: model.safetensors (the last; no model.best.safetensors yet)"
    )


def test_an_average_written_over_the_last_weights_wins_over_the_best(tmp_path: Path):
    cfg = TrainConfig(
        max_steps=4, lr=0.01, warmup_steps=0, schedule="constant", clip_norm=None, checkpoint_every=1,
        keep_checkpoints=4, eval_every=1, select_by="bleu",
    )  # fmt: skip
    torch.manual_seed(0)
    Trainer(torch.nn.Linear(3, 3), ScoredTask([10.0, 30.0, 20.0, 20.0]), cfg, tmp_path).fit(quiet=True)
    folder = RunDir(tmp_path)
    assert chosen_weights(folder, "bleu")[0] == tmp_path / RunDir.BEST
    averaged = average_checkpoints(tmp_path, 2)
    path, note = chosen_weights(folder, "bleu")
    names = ", ".join(p.name for p in averaged.checkpoints)
    assert path == folder.weights and len(averaged.checkpoints) == 2
    assert note == f"weights: model.safetensors (the average of {names}: vaswani average)"


def test_a_translation_run_is_exported_with_the_weights_it_translates_with(tmp_path, capsys):
    run, _ = copied_run("translation", tmp_path)
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    config["train"]["select_by"] = "bleu"
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    last = load_file(run / RunDir.WEIGHTS)
    torch.manual_seed(0)
    best = {name: t + 0.01 * torch.randn_like(t) if t.is_floating_point() else t for name, t in last.items()}
    metadata = {"select_by": "bleu", "metric": "valid_bleu", "value": "1.0", "step": "1"}
    save_file(best, run / RunDir.BEST, metadata=metadata)
    assert chosen_weights(RunDir(run), "bleu")[0] == run / RunDir.BEST
    # the same run holding those weights as its last ones, and no best
    shutil.copytree(run, tmp_path / "as_last")
    (tmp_path / "as_last" / RunDir.BEST).rename(tmp_path / "as_last" / RunDir.WEIGHTS)
    for name in ("translation", "as_last"):
        assert main(["export-hf", str(tmp_path / name), str(tmp_path / f"{name}-hf")]) == 0
    capsys.readouterr()
    exported = load_file(tmp_path / "translation-hf" / RunDir.WEIGHTS)
    expected = load_file(tmp_path / "as_last-hf" / RunDir.WEIGHTS)
    assert exported.keys() == expected.keys()
    for name, tensor in exported.items():
        assert torch.equal(tensor, expected[name]), name
