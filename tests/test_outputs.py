"""Outputs that never overwrite inputs (:mod:`vaswani.cli.outputs`): what is allowed beside what
the catalogue (``tests/test_bad_inputs.py``) refuses: ``--force`` over a file that is no input, a
new file in the command's own run, a default output written again, a new run whose parents are
made."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import tiny_lm_run
from vaswani.cli import main
from vaswani.cli.outputs import check_output, enclosing_run, is_run
from vaswani.errors import ConfigError
from vaswani.rundir import RunDir


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_lm_run(tmp_path_factory.mktemp("outputs"), "--max-steps", "4", "--checkpoint-every", "2")


def test_force_overwrites_a_file_that_is_no_input(run, tmp_path, capsys):
    text = run.parent / "train.txt"
    out = tmp_path / "old.png"
    out.write_bytes(b"old")
    assert main(["plot", str(run), "--out", str(out)]) == 2
    assert "already exists; give --force" in capsys.readouterr().err
    assert out.read_bytes() == b"old"
    assert main(["plot", str(run), "--out", str(out), "--force"]) == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    with pytest.raises(ConfigError, match="is also an input"):
        check_output(text, "--out", {"--text": [text]}, force=True)


def test_the_own_run_takes_new_files_and_its_default_outputs_again(run, capsys):
    assert main(["plot", str(run)]) == 0
    assert main(["plot", str(run)]) == 0, "a default output is the command's own, written again"
    assert main(["average", str(run), "--last", "2", "--out", str(run / "averaged.safetensors")]) == 0
    assert (run / "averaged.safetensors").is_file()
    check_output(run / "new.png", "--out", own_run=run)
    with pytest.raises(ConfigError, match="lies inside the run directory"):
        check_output(run / "x.png", "--out")
    for own in ("config.json", "tokenizer.json", "train_log.csv", ".lock", "checkpoints/step_00000002"):
        with pytest.raises(ConfigError, match="is one of the files of the run"):
            check_output(run / own, "--out", own_run=run, force=True)
    capsys.readouterr()


def test_a_run_is_known_by_its_config(run, tmp_path):
    assert is_run(run)
    assert enclosing_run((run / "a" / "b.png").resolve()) == run.resolve()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))  # a Hugging Face folder
    assert not is_run(tmp_path)
    assert enclosing_run(tmp_path / "x.txt") is None


def test_links_resolve_to_the_file_they_name(tmp_path):
    source = tmp_path / "src.txt"
    source.write_text("a\n")
    os.link(source, tmp_path / "hard.txt")
    (tmp_path / "soft.txt").symlink_to(source)
    for alias in ("hard.txt", "soft.txt"):
        with pytest.raises(ConfigError, match=r"is also an input \(--src"):
            check_output(tmp_path / alias, "--out", {"--src": source}, force=True)
    check_output(tmp_path / "new.txt", "--out", {"--src": source})


def test_a_new_run_gets_its_parents_made_and_a_stub_loses_them(tmp_path):
    out = tmp_path / "a" / "b" / "run"
    folder, lock = RunDir.create(out, "lm")
    assert out.is_dir() and lock.made == tmp_path / "a"
    (out / "config.json").write_text("{}")
    assert folder.remove_stub(lock)
    lock.release()
    assert list(tmp_path.iterdir()) == []
