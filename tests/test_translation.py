"""The translation task from the command line: a real run end to end, ``translate`` and
``evaluate`` with their decoding flags (bad input answered in one line: test_bad_inputs.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.helpers import tiny_args, write_reverse_task
from vaswani.cli import main
from vaswani.generation.config import DecodingConfig
from vaswani.pipelines.translation import Translator


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


def test_texts_may_follow_the_options(trained, capsys):
    """``translate RUN --beam 3 "a b c"``: argparse alone matches the optional texts (an empty
    list) before the options and then refuses the texts; they must reach the command."""
    assert main(["translate", str(trained), "a b c", "d e", "--beam", "3"]) == 0
    texts_first = capsys.readouterr().out
    assert main(["translate", str(trained), "--beam", "3", "a b c", "d e"]) == 0
    assert capsys.readouterr().out == texts_first
    assert main(["translate", str(trained), "a b c", "--beam", "3", "d e"]) == 0
    assert capsys.readouterr().out == texts_first
    assert len(texts_first.splitlines()) == 2
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", str(trained), "--beam", "3", "a b c", "--no-such-flag"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments:" in (err := capsys.readouterr().err) and "--no-such-flag" in err


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


def test_translate_output_budget_and_early_stopping_are_the_apis(trained, capsys, monkeypatch):
    """``--max-new-tokens`` and ``--early-stopping`` reach the translator: it receives the
    DecodingConfig of those fields, and the printed lines are the Python API's with it."""
    from vaswani.generation.config import DecodingConfig
    from vaswani.pipelines.translation import Translator

    texts = ["a b c d e f", "d e"]
    expected = {
        decoding: Translator.load(trained).translate(texts, decoding)
        for decoding in (
            DecodingConfig(max_new_tokens=2),
            DecodingConfig(beam=3, early_stopping="never"),
            DecodingConfig(beam=3, early_stopping=False, max_new_tokens=3),
        )
    }
    received: list[DecodingConfig] = []
    translate = Translator.translate

    def recording(self: Translator, sentences: list[str], decoding: DecodingConfig, **kw: int) -> list[str]:
        received.append(decoding)
        return translate(self, sentences, decoding, **kw)

    monkeypatch.setattr(Translator, "translate", recording)
    flags = [
        ["--max-new-tokens", "2"], ["--beam", "3", "--early-stopping", "never"],
        ["--beam", "3", "--early-stopping", "false", "--max-new-tokens", "3"],
    ]  # fmt: skip
    for argv, (decoding, lines) in zip(flags, expected.items(), strict=True):
        assert main(["translate", str(trained), *texts, *argv]) == 0
        assert received.pop() == decoding
        assert capsys.readouterr().out.splitlines() == lines


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


def test_an_existing_run_is_never_overwritten(trained, capsys):
    before = (trained / "model.safetensors").read_bytes()
    src, tgt = trained.parent / "train.src", trained.parent / "train.tgt"
    assert main(tiny_args(src, tgt, trained)) == 2
    assert "already exists" in capsys.readouterr().err
    assert (trained / "model.safetensors").read_bytes() == before


def test_variant_flags_reach_the_saved_config_and_the_model(tmp_path, capsys):
    import json

    src, tgt = write_reverse_task(tmp_path, n=120)
    out = tmp_path / "variant"
    flags = ["--norm", "pre_rmsnorm", "--position", "relative", "--attn-window", "2", "--shared-vocab"]
    assert main([*tiny_args(src, tgt, out), *flags]) == 0
    model = json.loads((out / "config.json").read_text())["model"]
    assert (model["norm"], model["norm_placement"]) == ("rmsnorm", "pre")  # pre_rmsnorm, as two fields
    assert (model["position"], model["attn_window"]) == ("relative", 2)
    assert model["tie_embeddings"] == "all"
    assert model["src_vocab_size"] == model["tgt_vocab_size"]
    capsys.readouterr()
    assert main(["translate", str(out), "a b c"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_a_pad_id_that_disagrees_with_the_tokenizers_is_refused(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "fixtures" / "run_dirs" / "translation", run)
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    config["model"]["pad_id"] = 3
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert main(["translate", str(run), "a b"]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "src_tokenizer.json: its padding id is 0, the model's pad_id is 3" in error


def test_decoding_never_produces_the_rows_that_pad_the_embedding(monkeypatch) -> None:
    translator = Translator.load(Path(__file__).parent / "fixtures" / "run_dirs" / "translation", "cpu")
    padding = translator.tgt_tok.vocab_size  # the first row past the tokenizer's vocabulary
    assert translator.model.config.tgt_vocab_size > padding
    sentences = ["a b c", "d e"]
    plain = [translator.translate(sentences), translator.translate(sentences, DecodingConfig(beam=3))]
    decode = translator.model.decode

    def favouring_padding(*args, **kwargs):
        logits, cache = decode(*args, **kwargs)
        logits[..., padding] = 1e4
        return logits, cache

    monkeypatch.setattr(translator.model, "decode", favouring_padding)
    assert [translator.translate(sentences), translator.translate(sentences, DecodingConfig(beam=3))] == plain
