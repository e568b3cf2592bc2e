"""Nothing let in: a run directory is untrusted input. Weights are never unpickled, optimizer
state is read with ``weights_only=True``, and its config and tokenizers are validated like the
user's own, each refusal one line naming the file or the field."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save
from tokenizers import Tokenizer, models

from tests.helpers import load_checkpoint, resign, tiny_args, write_reverse_task
from vaswani.cli import main
from vaswani.errors import RunDirError
from vaswani.io import load_weights, model_bytes
from vaswani.layers.quantize import quantize_int8
from vaswani.models.transformer import Transformer
from vaswani.rundir import RunDir
from vaswani.tokenizer import TextTokenizer
from vaswani.training.checkpoint import list_checkpoints


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("safe")
    src, tgt = write_reverse_task(folder)
    assert main(tiny_args(src, tgt, folder / "run", "--checkpoint-every", "3")) == 0
    return folder / "run"


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A copy of the trained run that a test may damage."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


class RunsCode:
    """Unpickling this runs code: it creates ``marker`` (what an attacker's file would do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (f"open({str(self.marker)!r}, 'w').close()",)


def malicious_files(marker: Path) -> dict[str, bytes]:
    """A torch.save file and a bare pickle that both run code when loaded without weights_only."""
    saved = io.BytesIO()
    torch.save({"optimizer": RunsCode(marker), "rng": {}}, saved)
    return {"torch.save": saved.getvalue(), "pickle": pickle.dumps(RunsCode(marker), protocol=2)}


def assert_really_malicious(kind: str, data: bytes, marker: Path) -> None:
    """Check the test's premise: loading ``data`` unsafely does run code."""
    if kind == "torch.save":
        torch.load(io.BytesIO(data), weights_only=False)
    else:
        pickle.loads(data)
    assert marker.exists()
    marker.unlink()


def cli_error(argv: list[str], capsys) -> str:
    """Run the command, which must refuse with status 2 and no traceback; return its message."""
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("vaswani: error: ") and "Traceback" not in err, err
    return err


def translate_error(run: Path, capsys) -> str:
    return cli_error(["translate", str(run), "a b c"], capsys)


def resume_argv(run: Path) -> list[str]:
    return ["train", "translation", "--resume", str(run), "--max-steps", "9", "--quiet"]


@pytest.mark.parametrize("kind", ["torch.save", "pickle"])
def test_malicious_optimizer_state_is_refused_and_never_run(run, tmp_path, capsys, kind):
    marker = tmp_path / "marker"
    data = malicious_files(marker)[kind]
    assert_really_malicious(kind, data, marker)
    checkpoint = list_checkpoints(run)[-1]
    (checkpoint / "optimizer.pt").write_bytes(data)
    model = Transformer(RunDir(run).read_config().model)
    with pytest.raises(RunDirError, match="checkpoint"):
        load_checkpoint(checkpoint, model, torch.optim.Adam(model.parameters()))
    assert not marker.exists()
    resign(checkpoint)  # through the command too, with a manifest that vouches for the file
    assert str(checkpoint) in cli_error(resume_argv(run), capsys)
    assert not marker.exists()


def test_refused_optimizer_state_is_reported_in_one_line(run, tmp_path, capsys):
    checkpoint = list_checkpoints(run)[-1]
    (checkpoint / "optimizer.pt").write_bytes(malicious_files(tmp_path / "marker")["torch.save"])
    resign(checkpoint)
    err = cli_error(resume_argv(run), capsys)
    assert len(err.splitlines()) == 1, err
    assert "optimizer.pt" in err and "weights_only=False" not in err


@pytest.mark.parametrize("kind", ["torch.save", "pickle"])
@pytest.mark.parametrize("where", ["run", "checkpoint"])
def test_weights_that_are_a_pickle_are_refused_in_one_line(run, tmp_path, capsys, kind, where):
    marker = tmp_path / "marker"
    checkpoint = list_checkpoints(run)[-1]
    target = run if where == "run" else checkpoint
    (target / "model.safetensors").write_bytes(malicious_files(marker)[kind])
    resign(checkpoint)
    err = translate_error(run, capsys) if where == "run" else cli_error(resume_argv(run), capsys)
    assert len(err.splitlines()) == 1, err
    assert str(target / "model.safetensors") in err
    assert not marker.exists()


def _set(section: str, **fields: Any) -> Callable[[dict[str, Any]], None]:
    return lambda cfg: cfg[section].update(fields)


# (name, change to the parsed config.json, words the one-line message must contain)
CONFIG_CASES: list[tuple[str, Callable[[dict[str, Any]], None], list[str]]] = [
    ("unknown top-level field", lambda c: c.update(weights="../../x"), ["config.json", "'weights'"]),
    ("unknown model field", _set("model", n_head=4), ["config.json", "model.n_head"]),
    ("unknown train field", _set("train", learning_rate=1.0), ["config.json", "train.learning_rate"]),
    ("wrong type", _set("model", d_model="64"), ["config.json", "model.d_model", "int"]),
    ("bool for an int", _set("model", n_heads=True), ["config.json", "model.n_heads"]),
    ("wrong train type", _set("train", lr="fast"), ["config.json", "train.lr"]),
    ("heads do not divide", _set("model", n_heads=5), ["config.json", "model.n_heads", "divide"]),
    ("negative size", _set("model", d_ff=-128), ["config.json", "model.d_ff", "> 0"]),
    ("zero layers", _set("model", n_encoder_layers=0), ["config.json", "model.n_encoder_layers"]),
    ("impossible dropout", _set("model", dropout=1.5), ["config.json", "model.dropout"]),
    ("NaN", _set("model", norm_eps=float("nan")), ["config.json", "NaN"]),
    ("Infinity", _set("train", lr=float("inf")), ["config.json", "Infinity"]),
    ("unknown variant", _set("model", norm="batch_norm"), ["config.json", "model.norm"]),
    ("section not a mapping", lambda c: c.update(model=[64, 4]), ["config.json", "'model'"]),
    ("data not a mapping", lambda c: c.update(data="abc"), ["config.json", "'data'"]),
    ("missing section", lambda c: c.pop("model"), ["config.json", "missing", "'model'"]),
    ("newer format", lambda c: c.update(format_version=2), ["config.json", "format_version 2", "upgrade"]),
    (
        "newer format with new fields",
        lambda c: c.update(format_version=2, tokenizers={"src": "x"}),
        ["format_version 2", "upgrade"],
    ),
    ("version not a number", lambda c: c.update(format_version="1"), ["config.json", "format_version"]),
    ("version missing", lambda c: c.pop("format_version"), ["config.json", "format_version"]),
    ("another task", lambda c: c.update(task="language_model"), ["'language_model'", "'translation'"]),
    ("no task", lambda c: c.pop("task"), ["config.json", "'task'"]),
]


@pytest.mark.parametrize(("name", "change", "words"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_a_bad_run_config_is_refused_in_one_line(run, capsys, name, change, words):
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    change(config)
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    err = translate_error(run, capsys)
    assert len(err.splitlines()) == 1, err
    for word in words:
        assert word in err, (word, err)


EVALUATE = ["evaluate", "{run}", "--src", "{src}", "--ref", "{src}"]
DATA_CASES = [
    ("unknown field", {"vocab_sise": 100}, ["translate", "{run}", "a b"], ["data.vocab_sise"]),
    ("path not a string", {"src": 5}, ["train", "translation", "--resume", "{run}"], ["data.src"]),
    ("unknown BLEU tokenizer", {"bleu_tokenize": "nope"}, EVALUATE, ["data.bleu_tokenize"]),
]


@pytest.mark.parametrize(("name", "fields", "argv", "words"), DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_a_bad_data_field_is_refused_in_one_line(run, capsys, name, fields, argv, words):
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    src = config["data"]["src"]
    config["data"].update(fields)
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    err = cli_error([a.format(run=run, src=src) for a in argv], capsys)
    for word in ["config.json", *words]:
        assert word in err, (word, err)


@pytest.mark.parametrize(
    ("content", "words"),
    [(b"{not json", ["config.json", "not valid JSON"]), (b"\xff\xfe{}", ["config.json", "not valid JSON"]),
     (b"[1, 2]", ["config.json", "JSON object"])],
    ids=["not JSON", "not UTF-8", "not an object"],
)  # fmt: skip
def test_a_config_that_is_not_a_json_object_is_refused(run, capsys, content, words):
    (run / "config.json").write_bytes(content)
    err = translate_error(run, capsys)
    for word in words:
        assert word in err, (word, err)


def test_a_config_that_does_not_fit_the_weights_is_refused_in_one_line(run, capsys):
    config = json.loads((run / "config.json").read_text(encoding="utf-8"))
    config["model"]["d_model"] = 128
    (run / "config.json").write_text(json.dumps(config), encoding="utf-8")
    err = translate_error(run, capsys)
    assert len(err.splitlines()) == 1, err
    assert "model.safetensors" in err


def _word_level(vocab: list[str]) -> bytes:
    return (
        Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token=vocab[-1]))
        .to_str()
        .encode()
    )


TOKENIZER_CASES = [
    ("not JSON", b"<html>", ["not a readable tokenizer file"]),
    ("JSON but not a tokenizer", b'{"vocab": [1, 2]}', ["not a readable tokenizer file"]),
    ("no special tokens", _word_level(["a", "b", "c", "d", "e"]), ["<pad> at id 0"]),
    ("special tokens moved", _word_level(["<bos>", "<pad>", "<eos>", "<unk>", "a"]), ["<pad> at id 0"]),
    ("empty", b"", ["not a readable tokenizer file"]),
]


@pytest.mark.parametrize("name", ["src_tokenizer.json", "tgt_tokenizer.json"])
@pytest.mark.parametrize(("case", "content", "words"), TOKENIZER_CASES, ids=[c[0] for c in TOKENIZER_CASES])
def test_a_bad_tokenizer_file_is_refused_in_one_line(run, capsys, name, case, content, words):
    (run / name).write_bytes(content)
    err = translate_error(run, capsys)
    assert len(err.splitlines()) == 1, err
    for word in [str(run / name), *words]:
        assert word in err, (word, err)


@pytest.mark.parametrize("name", ["src_tokenizer.json", "tgt_tokenizer.json"])
def test_a_tokenizer_larger_than_the_embedding_is_refused(run, capsys, name):
    words = [f"w{i}x{i * 7 % 13}" for i in range(200)]
    big = TextTokenizer.train_bpe(
        [" ".join(words[i : i + 5]) for i in range(0, 200, 5)], 300, min_frequency=1
    )
    embedding = RunDir(run).read_config().model.src_vocab_size
    assert big.vocab_size > embedding
    big.save(run / name)
    err = translate_error(run, capsys)
    assert len(err.splitlines()) == 1, err
    for word in [str(run / name), f"vocabulary of {big.vocab_size}", f"embedding of {embedding}"]:
        assert word in err, (word, err)


def test_the_untouched_copy_still_translates(run, capsys):
    """The damaged runs above fail because of their damage, not because a copy cannot be used."""
    assert main(["translate", str(run), "a b c"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_a_weight_loads_only_into_a_tensor_of_a_type_it_fits(tmp_path):
    """A quantized model's int8 weights load into int8 (the check goes by the model, not by a fixed
    type); a float tensor into an int8 one, an int8 or bool tensor into a float one, or a NaN, is
    refused naming the file and the tensor, and leaves the model's weights as they were."""
    quantized = quantize_int8(torch.nn.Sequential(torch.nn.Linear(4, 3)))
    path = tmp_path / "model.safetensors"
    path.write_bytes(model_bytes(quantized))
    again = quantize_int8(torch.nn.Sequential(torch.nn.Linear(4, 3)))
    load_weights(again, path)
    assert again[0].weight_int8.dtype == torch.int8 and torch.equal(
        again[0].weight_int8, quantized[0].weight_int8
    )
    plain = torch.nn.Sequential(torch.nn.Linear(4, 3))
    before = {name: t.clone() for name, t in plain.state_dict().items()}
    weight, bias = plain[0].weight.detach(), torch.zeros(3)
    cases = (
        (again, {**quantized.state_dict(), "0.weight_int8": weight}, "'0.weight_int8' has dtype float32"),
        (plain, {"0.weight": weight.to(torch.int8), "0.bias": bias}, "'0.weight' has dtype int8"),
        (plain, {"0.weight": weight.bool(), "0.bias": bias}, "'0.weight' has dtype bool"),
        (plain, {"0.weight": weight, "0.bias": torch.full((3,), float("inf"))}, "'0.bias' has non-finite"),
    )
    expects = ("int8", "float32", "float32", None)
    for (model, tensors, words), dtype in zip(cases, expects, strict=True):
        words += f", the model expects {dtype}" if dtype else r" values \(inf\)"
        path.write_bytes(save({name: t.contiguous() for name, t in tensors.items()}))
        with pytest.raises(RunDirError, match=f"^{path}: tensor {words}$"):
            load_weights(model, path)
    assert all(torch.equal(plain.state_dict()[name], t) for name, t in before.items())
