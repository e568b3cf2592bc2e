"""Run directories written by an earlier vaswani (``tests/fixtures/run_dirs``, made at commit d24d0a9
before the layer above the core was restructured) still load, decode, evaluate and resume, and
give the outputs that version printed (``tests/fixtures/run_dirs/expected.json``).

Their ``config.json`` names their data files as ``{DATA}/…``: each test writes the same data
(the helpers are seeded) into a temporary folder and points the copied run there
(``helpers.copied_run``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import FIXTURES, copied_run
from vaswani.cli import main

EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))

# Task → (commands whose standard output is compared, {RUN} and {DATA} filled in).
COMMANDS: dict[str, list[list[str]]] = {
    "translation": [
        ["translate", "{RUN}", "a b c", "l h k"],
        ["translate", "{RUN}", "--beam", "3", "--n-best", "2", "a b c d"],
        ["evaluate", "{RUN}", "--src", "{DATA}/train.src", "--ref", "{DATA}/train.tgt"],
    ],
    "lm": [
        ["generate", "{RUN}", "The ", "the cat", "--max-new-tokens", "12", "--temperature", "0"],
        ["evaluate", "{RUN}", "--text", "{DATA}/train.txt"],
    ],
    "mlm": [
        ["fill-mask", "{RUN}", "one [MASK] three", "--top-k", "3"],
        ["evaluate", "{RUN}", "--text", "{DATA}/repeated.txt"],
    ],
    "classify": [
        ["classify", "{RUN}", "a great movie", "the plot was awful"],
        ["evaluate", "{RUN}", "--labeled", "{DATA}/dev.tsv"],
    ],
    "encoder": [],
}
TRAINABLE = ("translation", "lm", "mlm", "classify")


def filled(command: list[str], run: Path, data: Path) -> list[str]:
    return [a.replace("{RUN}", str(run)).replace("{DATA}", str(data)) for a in command]


def output_of(command: list[str], run: Path, data: Path, capsys) -> str:
    capsys.readouterr()
    assert main(filled(command, run, data)) == 0
    return capsys.readouterr().out.replace(str(run), "{RUN}").replace(str(data), "{DATA}")


@pytest.mark.parametrize("task", sorted(COMMANDS))
def test_an_old_run_decodes_and_evaluates_as_before(task, tmp_path, capsys):
    run, data = copied_run(task, tmp_path)
    for command, expected in zip(COMMANDS[task], EXPECTED[task]["outputs"], strict=True):
        assert output_of(command, run, data, capsys) == expected, command


def test_an_old_encoder_run_embeds_as_before(tmp_path):
    run, _ = copied_run("encoder", tmp_path)
    out = tmp_path / "vectors.npy"
    assert main(["embed", str(run), "one two three", "four five", "--out", str(out)]) == 0
    np.testing.assert_allclose(np.load(out), np.array(EXPECTED["encoder"]["vectors"]), atol=1e-6)


@pytest.mark.parametrize("task", TRAINABLE)
def test_an_old_run_resumes(task, tmp_path):
    """Resumed from its newest checkpoint (step 40) up to step 45, as the old code resumed it."""
    run, _ = copied_run(task, tmp_path)
    assert main(["train", task, "--resume", str(run), "--max-steps", "45", "--quiet"]) == 0
    metrics = json.loads((run / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["steps"] == 45
    for name, value in EXPECTED[task]["resumed"].items():
        assert metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name
