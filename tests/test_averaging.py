"""Checkpoint averaging: the mean of the checkpoint tensors, written atomically, usable at once;
bad inputs answered in one line with nothing written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from tests.helpers import save_checkpoint, tiny_args, write_reverse_task
from vaswani.cli import main
from vaswani.errors import RunDirError
from vaswani.generation.config import DecodingConfig
from vaswani.pipelines.translation import Translator
from vaswani.training.averaging import BACKUP, average_checkpoints
from vaswani.training.checkpoint import list_checkpoints

CHECKPOINT_FLAGS = ("--checkpoint-every", "2", "--keep-checkpoints", "3")  # steps 2, 4 and 6 of 6


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("average")
    src, tgt = write_reverse_task(folder, n=200)
    assert main(tiny_args(src, tgt, folder / "run", *CHECKPOINT_FLAGS)) == 0
    return folder / "run"


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained run that a test may change."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _mean_of_checkpoints(run_dir: Path, last: int) -> dict[str, torch.Tensor]:
    loaded = [load_file(p / "model.safetensors") for p in list_checkpoints(run_dir)[-last:]]
    return {name: torch.stack([w[name] for w in loaded]).mean(dim=0) for name in loaded[0]}


def test_the_keep_checkpoints_flag_keeps_that_many(trained):
    assert [p.name for p in list_checkpoints(trained)] == ["step_00000002", "step_00000004", "step_00000006"]


def test_average_is_the_mean_of_the_checkpoints_and_translates(run, capsys):
    before = (run / "model.safetensors").read_bytes()
    expected = _mean_of_checkpoints(run, 3)
    assert main(["average", str(run), "--last", "3"]) == 0
    out = capsys.readouterr().out
    assert "averaged 3 checkpoints (step_00000002, step_00000004, step_00000006)" in out
    assert BACKUP in out
    averaged = load_file(run / "model.safetensors")
    assert averaged.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(averaged[name], tensor, atol=1e-7, rtol=1e-6)
    assert (run / BACKUP).read_bytes() == before  # the trained weights are kept
    translator = Translator.load(run)
    assert len(translator.translate(["a b c", "d e"], DecodingConfig(beam=3))) == 2
    assert main(["translate", str(run), "a b c"]) == 0
    # A second averaging replaces the model again but leaves the trained weights where they are.
    assert main(["average", str(run), "--last", "2"]) == 0
    assert (run / BACKUP).read_bytes() == before
    averaged = load_file(run / "model.safetensors")
    for name, tensor in _mean_of_checkpoints(run, 2).items():
        torch.testing.assert_close(averaged[name], tensor, atol=1e-7, rtol=1e-6)


def test_average_to_another_file_leaves_the_run_alone(run, tmp_path, capsys):
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    out = tmp_path / "averaged.safetensors"
    assert main(["average", str(run), "--last", "2", "--out", str(out)]) == 0
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    averaged = load_file(out)
    for name, tensor in _mean_of_checkpoints(run, 2).items():
        torch.testing.assert_close(averaged[name], tensor, atol=1e-7, rtol=1e-6)
    assert list(tmp_path.glob(".*.tmp")) == []


def _damage(run: Path) -> None:
    weights = list_checkpoints(run)[1] / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))


# (name, preparation of the copied run, arguments after RUN_DIR, words the one-line message must contain)
CASES = [
    ("more than kept", None, ["--last", "4"], ["3 checkpoints kept", "--keep-checkpoints 4", "train.keep"]),
    ("zero", None, ["--last", "0"], ["--last", ">= 1"]),
    ("no checkpoints", lambda r: shutil.rmtree(r / "checkpoints"), ["--last", "1"], ["no checkpoints"]),
    ("damaged", _damage, ["--last", "3"], ["step_00000004", "sha256", "damaged"]),
    ("not a run", lambda r: (r / "config.json").unlink(), ["--last", "1"], ["not a vaswani run directory"]),
    ("unwritable --out", None, ["--last", "1", "--out", "{run}/missing/x.safetensors"], ["cannot write"]),
]


@pytest.mark.parametrize(("name", "prepare", "extra", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_and_writes_nothing(run, capsys, name, prepare, extra, words):
    if prepare is not None:
        prepare(run)
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    assert main(["average", str(run), *[e.format(run=run) for e in extra]]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("vaswani: error: ")
    for word in words:
        assert word in err, (word, err)
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before


def test_averaging_works_for_any_model(tmp_path):
    """Only weights are read: any module's checkpoints average, tied weights stay stored once."""
    model = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    model[1].weight = model[0].weight
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    snapshots = []
    for step in (1, 2):
        with torch.no_grad():
            model[0].weight.fill_(float(step))
        snapshots.append(model[0].weight.detach().clone())
        save_checkpoint(tmp_path, model, optimizer, {"step": step}, keep=5)
    done = average_checkpoints(tmp_path, 2)
    assert done.backup is None and done.out == tmp_path / "model.safetensors"
    averaged = load_file(done.out)
    assert list(averaged) == ["0.weight"]
    torch.testing.assert_close(averaged["0.weight"], (snapshots[0] + snapshots[1]) / 2)
    with pytest.raises(RunDirError, match="2 checkpoints kept"):
        average_checkpoints(tmp_path, 3)
