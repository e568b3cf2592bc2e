"""The command line: a real run end to end, and bad input answered in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import tiny_args, write_reverse_task
from vaswani.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cli")
    src, tgt = write_reverse_task(folder)
    assert main(tiny_args(src, tgt, folder / "run")) == 0
    return folder / "run"


def test_train_writes_a_complete_run_directory(trained):
    names = {p.name for p in trained.iterdir()}
    assert {"config.json", "model.safetensors", "metrics.json", "train_log.csv"} <= names
    assert {"src_tokenizer.json", "tgt_tokenizer.json", "checkpoints"} <= names
    import json

    metrics = json.loads((trained / "metrics.json").read_text())
    for key in ("bleu", "chrf", "valid_loss", "train_seconds", "steps", "bleu_signature"):
        assert key in metrics


def test_translate_arguments_and_stdin_agree(trained, capsys, monkeypatch):
    import io

    assert main(["translate", str(trained), "a b c", "d e"]) == 0
    from_args = capsys.readouterr().out.splitlines()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a b c\nd e\n")))
    assert main(["translate", str(trained)]) == 0
    assert capsys.readouterr().out.splitlines() == from_args
    assert len(from_args) == 2


def test_translate_with_beam_search_n_best_and_sampling(trained, capsys):
    assert main(["translate", str(trained), "a b c", "d e", "--beam", "3", "--n-best", "2"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [(fields[0], len(fields)) for fields in lines] == [("0", 3), ("0", 3), ("1", 3), ("1", 3)]
    scores = [float(fields[1]) for fields in lines]
    assert scores[0] >= scores[1] and scores[2] >= scores[3]
    assert main(["translate", str(trained), "a b c", "d e", "--beam", "3", "--length-penalty", "1.0"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2
    sampled = ["translate", str(trained), "a b c", "d e", "--temperature", "1.5", "--top-p", "0.9"]
    sampled += ["--seed", "4"]
    assert main(sampled) == 0
    first = capsys.readouterr().out
    assert main(sampled) == 0
    assert capsys.readouterr().out == first


def test_evaluate_with_beam_search(trained, capsys):
    folder = trained.parent
    out = folder / "beam.hyp"
    args = ["evaluate", str(trained), "--src", str(folder / "train.src"), "--ref", str(folder / "train.tgt")]
    assert main([*args, "--beam", "2", "--length-penalty-kind", "simple", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "BLEU" in printed and "chrF" in printed and "beam 2, simple length penalty 0.6" in printed
    assert "nrefs:1" in printed and "tok:13a" in printed
    assert len(out.read_text().splitlines()) == len((folder / "train.src").read_text().splitlines())
    assert main([*args, "--beam", "0"]) == 2
    assert capsys.readouterr().err.strip() == "vaswani: error: --beam must be >= 1, got 0"


def _files(tmp_path: Path) -> dict[str, Path]:
    src, tgt = write_reverse_task(tmp_path, n=50)
    made = {"src": src, "tgt": tgt}
    short = tmp_path / "short.tgt"
    short.write_text("".join(src.read_text().splitlines(keepends=True)[:-1]))
    made["short"] = short
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    made["empty"] = empty
    latin1 = tmp_path / "latin1.src"
    latin1.write_bytes(b"a b\nc d\nGr\xfc\xdfe a\n")
    made["latin1"] = latin1
    long_src = tmp_path / "long.src"
    lines = src.read_text().splitlines()
    lines[6] = " ".join(["a"] * 600)
    long_src.write_text("\n".join(lines) + "\n")
    made["long"] = long_src
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("model:\n  d_model: 64\n  n_head: 4\n")
    made["unknown_field"] = cfg
    bad_yaml = tmp_path / "broken.yaml"
    bad_yaml.write_text("model:\n  d_model: [64\n")
    made["broken_yaml"] = bad_yaml
    made["not_a_run"] = tmp_path
    return made


def _decode(files: dict[str, Path], *flags: str) -> list[str]:
    """``translate`` with decoding flags, which are checked before the run directory."""
    return ["translate", str(files["not_a_run"]), "a", *flags]


# (name, arguments built from the files, words the one-line message must contain)
CASES = [
    ("unequal line counts", lambda f, o: tiny_args(f["src"], f["short"], o), ["short.tgt", "50", "49"]),
    ("empty file", lambda f, o: tiny_args(f["empty"], f["tgt"], o), ["empty.txt", "empty"]),
    ("missing file", lambda f, o: tiny_args(f["src"].with_name("nope.src"), f["tgt"], o), ["nope.src"]),
    ("directory as file", lambda f, o: tiny_args(f["not_a_run"], f["tgt"], o), ["directory"]),
    ("not UTF-8", lambda f, o: tiny_args(f["latin1"], f["tgt"], o), ["latin1.src:3", "UTF-8"]),
    ("over-long line", lambda f, o: tiny_args(f["long"], f["tgt"], o), ["long.src:7", "max_len"]),
    (
        "unknown config field",
        lambda f, o: [*tiny_args(f["src"], f["tgt"], o), "--config", str(f["unknown_field"])],
        ["bad.yaml", "model.n_head"],
    ),
    (
        "broken YAML",
        lambda f, o: [*tiny_args(f["src"], f["tgt"], o), "--config", str(f["broken_yaml"])],
        ["broken.yaml:", "YAML"],
    ),
    ("heads do not divide", lambda f, o: [*tiny_args(f["src"], f["tgt"], o), "--heads", "5"], ["n_heads"]),
    ("zero window", lambda f, o: [*tiny_args(f["src"], f["tgt"], o), "--attn-window", "0"], ["attn_window"]),
    ("negative steps", lambda f, o: [*tiny_args(f["src"], f["tgt"], o), "--max-steps", "-1"], ["max_steps"]),
    ("not a run directory", lambda f, o: ["translate", str(f["not_a_run"]), "a b"], ["config.json"]),
    ("missing run directory", lambda f, o: ["translate", str(o / "missing"), "a b"], ["no such run"]),
    ("resume from nothing", lambda f, o: ["train", "translation", "--resume", str(o)], ["no such run"]),
    ("zero beam", lambda f, o: _decode(f, "--beam", "0"), ["--beam", ">= 1"]),
    (
        "n-best above beam",
        lambda f, o: _decode(f, "--beam", "2", "--n-best", "3"),
        ["--n-best", "--beam (2)"],
    ),
    ("beam and sampling", lambda f, o: _decode(f, "--beam", "2", "--top-k", "5"), ["--beam", "sampling"]),
    (
        "penalty without beam",
        lambda f, o: _decode(f, "--length-penalty", "1"),
        ["--length-penalty", "--beam"],
    ),
    (
        "unknown length penalty",
        lambda f, o: _decode(f, "--beam", "2", "--length-penalty-kind", "wu"),
        ["gnmt", "simple", "'wu'"],
    ),
    ("seed without sampling", lambda f, o: _decode(f, "--seed", "1"), ["--seed", "--temperature"]),
]


@pytest.mark.parametrize(("name", "build", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gives_one_line_and_writes_nothing(tmp_path, capsys, name, build, words):
    files = _files(tmp_path)
    out = tmp_path / "out"
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert main(build(files, out)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("vaswani: error: ")
    for word in words:
        assert word in err, (word, err)
    assert "Traceback" not in err
    assert not out.exists()
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_an_existing_run_is_never_overwritten(trained, capsys):
    before = (trained / "model.safetensors").read_bytes()
    src, tgt = trained.parent / "train.src", trained.parent / "train.tgt"
    assert main(tiny_args(src, tgt, trained)) == 2
    assert "already exists" in capsys.readouterr().err
    assert (trained / "model.safetensors").read_bytes() == before


def test_the_installed_command_exits_non_zero_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "vaswani.cli", "translate", str(tmp_path), "hello"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"vaswani: error: {tmp_path}: not a vaswani run directory (no config.json)"
    ]
    debug = subprocess.run(
        [sys.executable, "-m", "vaswani.cli", "--debug", "translate", str(tmp_path), "hello"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_variant_flags_reach_the_saved_config_and_the_model(tmp_path, capsys):
    import json

    src, tgt = write_reverse_task(tmp_path, n=120)
    out = tmp_path / "variant"
    flags = ["--norm", "pre_rmsnorm", "--position", "relative", "--attn-window", "2", "--shared-vocab"]
    assert main([*tiny_args(src, tgt, out), *flags]) == 0
    model = json.loads((out / "config.json").read_text())["model"]
    assert (model["norm"], model["position"], model["attn_window"]) == ("pre_rmsnorm", "relative", 2)
    assert model["tie_embeddings"] == "all"
    assert model["src_vocab_size"] == model["tgt_vocab_size"]
    capsys.readouterr()
    assert main(["translate", str(out), "a b c"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
