"""The catalogue of bad input: every input a user can get wrong, through the command line or the
Python API, with its exact behaviour, in three tables.

- :data:`CLI`: refused commands. Each exits with status 2 and prints exactly one line on standard
  error, ``vaswani: error: …``, holding the row's words (the file and line, or the config field or
  flag, and what is wrong), with no traceback and nothing on standard output; no file is created,
  changed or removed, in the test's folder or in any of the module's runs and data.
- :data:`API`: refused calls. Each raises exactly the row's exception class (not a subclass), its
  message holding the row's words, and writes nothing either.
- :data:`DOCUMENTED`: inputs that look wrong but have a documented, non-error behaviour (a stop
  string never found, no sentences, zero-size tensors, a text longer than a BERT model's
  ``max_len``); each row checks that behaviour exactly, and that nothing is written. (A prompt
  longer than a language model's context is refused, a :data:`CLI` and :data:`API` row: only
  generation goes on past the context, dropping its oldest half.)

``--debug`` turns the one line back into a traceback (:func:`test_debug_shows_the_traceback`).

The image task's rows (family ``image``) use a tiny digits run: an image size the patch size does
not divide, a run of another task or a missing or non-image file given to ``classify-image``;
a truncated image, an unreadable file, an empty class folder, a single class or no folder given to
``train image --data``, a folder with a class the run lacks given to ``evaluate --data``, and a
``ViTModel`` folder (no classifier) to ``import-hf``; images of mixed modes and sizes are converted
as documented (:mod:`vaswani.data.images`).

The resource rows (issue 20) give a device, a FIFO without a writer, a dangling symbolic link, a
loop of links or a path through a file where a file is read, inputs past the limits (``env``:
``VASWANI_MAX_INPUT_BYTES``, ``VASWANI_MAX_LINE_CHARS``), a model that cannot fit in memory and a
run whose ``config.json`` vocabulary was edited to 1e9; the rest of those bounds is tested in
``tests/test_resources.py``, under a memory cap.

The weight and folder rows (issue 34) give a run whose ``model.safetensors`` holds a NaN, an int8
or a bool tensor (:func:`weight_files`), Hugging Face folders with an infinite or an int8 weight,
two tokens of one id or a repeated ``vocab.txt`` line, a Llama ``config.json`` with ids or a
context out of range, a ``model_type`` that is a list, and sizes past what memory or the machine
allows (``--image-size``, ``--rel-clip``, ``--threads``, ``--nproc``).

The other rows of issue 34 give a NUL byte to every text reader (standard input, a text, TSV or CoNLL-U
file, word vectors), word vectors with ``nan``, ``-inf`` or ``1e999``, and symbolic links planted
where a run is written (its log, ``checkpoints/``, the weights ``average`` keeps, the run folder
itself, a new run's ``--out``, ``evaluate --out``), each pointing outside the run: the snapshot
checks that nothing, the link's target included, was written. The rest is in
``tests/test_no_write_through_links.py`` and ``tests/test_reader_properties.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

from tests.helpers import (
    encoder_run,
    resign,
    tiny_args,
    tiny_classify_args,
    tiny_lm_args,
    tiny_mlm_args,
    write_lm_text,
    write_repeated_text,
    write_reverse_task,
    write_sentiment,
)
from tests.serving import serving
from vaswani.cli import main
from vaswani.config import ModelConfig, TrainConfig
from vaswani.data.labeled import read_labeled
from vaswani.data.readers import read_lines, read_parallel
from vaswani.errors import ConfigError, DataError, InputError, RunDirError
from vaswani.generation import compiled as compiled_decoding
from vaswani.generation.config import DecodingConfig
from vaswani.interop import export_hf, import_hf
from vaswani.layers.quantize import quantize_int8
from vaswani.pipelines.classify import TextClassifier
from vaswani.pipelines.encoder import SentenceEncoder
from vaswani.pipelines.image import ImageClassifier
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.mlm import MaskedLanguageModel
from vaswani.pipelines.translation import Translator
from vaswani.rundir import RunDir
from vaswani.serve.app import create_app
from vaswani.serve.settings import ServeSettings
from vaswani.tasks import lifecycle
from vaswani.tasks.translation import UNDERTRAINED
from vaswani.training.averaging import average_checkpoints, newest_checkpoints
from vaswani.training.checkpoint import list_checkpoints

FAMILIES = (
    "translation", "lm", "mlm", "classify", "fill-mask", "embed", "interop", "average", "plots",
    "evaluate", "image", "serve", "word-vectors", "tag",
)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The runs and files the rows are built from


@dataclass(frozen=True)
class Paths:
    """The module's data and tiny runs of each family (``newer``: the lm run with a config of a
    newer format version; ``future``: the translation run whose newest checkpoint has a field only
    a newer vaswani knows), and the test's own folder with the bad files of :func:`bad_files`."""

    data: Path
    tr: Path
    lm: Path
    mlm: Path
    cls: Path
    enc: Path
    newer: Path
    future: Path
    img: Path
    tmp: Path
    nat: Path

    def fill(self, argv: list[str]) -> list[str]:
        """``argv`` with its placeholders (``{data}``, ``{tr}``, ``{tmp}``…) replaced by the paths."""
        return [arg.format(**{k: str(v) for k, v in vars(self).items()}) for arg in argv]

    def snapshot(self) -> dict[Path, tuple[int, int]]:
        """Every file and folder under the module's folder and the test's, with its mtime and size."""
        found = [*self.data.rglob("*"), *self.tmp.rglob("*")]
        return {p: (p.lstat().st_mtime_ns, p.lstat().st_size) for p in found}  # links: the link itself


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    """Tiny runs of every family, trained a few steps (the rows need their files, not their skill);
    ``data`` is the folder that holds them all and their training data."""
    data = tmp_path_factory.mktemp("catalogue")
    src, tgt = write_reverse_task(data, n=100)
    tr = data / "translation_run"
    assert main(tiny_args(src, tgt, tr, "--max-steps", "2", "--checkpoint-every", "1")) == 0
    lm = data / "lm_run"
    lm_args = tiny_lm_args(write_lm_text(data / "lm.txt", lines=60), lm)
    lm_args[lm_args.index("--max-steps") + 1] = "20"
    assert main(lm_args) == 0
    mlm = data / "mlm_run"
    mlm_args = tiny_mlm_args(write_repeated_text(data / "repeated.txt", lines=40), mlm)
    mlm_args[mlm_args.index("--max-steps") + 1] = "3"
    assert main(mlm_args) == 0
    train, dev = write_sentiment(data, "train", 60, seed=0), write_sentiment(data, "dev", 20, seed=1)
    cls = data / "classify_run"
    assert main(tiny_classify_args(train, dev, cls, "--max-steps", "2", "--max-len", "24")) == 0
    newer = Path(shutil.copytree(lm, data / "newer_run"))
    config = json.loads((newer / "config.json").read_text(encoding="utf-8"))
    (newer / "config.json").write_text(json.dumps({**config, "format_version": 2}), encoding="utf-8")
    future = Path(shutil.copytree(tr, data / "future_run"))
    checkpoint = list_checkpoints(future)[-1]
    state = checkpoint / "trainer_state.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "ema_decay": 0.999}), encoding="utf-8")
    resign(checkpoint)
    img = data / "image_run"
    image_args = ["--d-model", "16", "--heads", "2", "--d-ff", "32", "--layers", "1", "--max-steps", "2"]
    assert main(["train", "image", "--out", str(img), *image_args, "--quiet", "--no-bf16"]) == 0
    nat = data / "nat_run"
    nat_args = tiny_args(src, tgt, nat, "--max-steps", "2", "--max-len", "24")
    nat_args[1] = "nat"  # the same tiny job, trained as a CMLM
    assert main(nat_args) == 0
    weight_files(data, lm, mlm)
    return Paths(data, tr, lm, mlm, cls, encoder_run(data), newer, future, img, data, nat)


def weight_files(data: Path, lm: Path, mlm: Path) -> None:
    """Copies of the lm run whose ``model.safetensors`` holds a NaN, an int8 or a bool tensor
    (``nan_run``, ``int8_run``, ``bool_run``); the lm run exported as GPT-2 with an infinite or an
    int8 weight (``hf_inf``, ``hf_int8``) or two tokens of one id in its ``tokenizer.json``
    (``hf_shared``); the mlm run exported as BERT with a ``vocab.txt`` that repeats a token
    (``hf_vocab``); Llama folders whose ``config.json`` has the BOS id 1e6, the EOS id -5 or a
    context of 1e12 (``llama_bos``, ``llama_eos``, ``llama_context``); a ``model_type`` that is a
    list (``hf_listed``)."""
    tensors = load_file(str(lm / "model.safetensors"))
    name = next(n for n in tensors if n.endswith("out_proj.weight"))
    for kind, bad in (("nan", float("nan")), ("int8", torch.int8), ("bool", torch.bool)):
        run = shutil.copytree(lm, data / f"{kind}_run", ignore=shutil.ignore_patterns("checkpoints"))
        changed = tensors[name].clone()
        changed = changed.fill_(bad) if isinstance(bad, float) else changed.to(bad)
        save_file({**tensors, name: changed}, str(run / "model.safetensors"))
    export_hf(lm, data / "hf_lm")
    hf_tensors = load_file(str(data / "hf_lm" / "model.safetensors"))
    hf_name = next(n for n in hf_tensors if n.endswith("attn.c_proj.weight"))
    for kind, change in (("inf", lambda t: t.fill_(float("inf"))), ("int8", lambda t: t.to(torch.int8))):
        folder = shutil.copytree(data / "hf_lm", data / f"hf_{kind}")
        save_file(
            {**hf_tensors, hf_name: change(hf_tensors[hf_name].clone())}, str(folder / "model.safetensors")
        )
    shared = shutil.copytree(data / "hf_lm", data / "hf_shared")
    tokenizer = json.loads((shared / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    vocab[max(vocab, key=vocab.get)] = vocab["a"]  # the last token takes the id of "a"
    (shared / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    bert = export_hf(mlm, data / "hf_vocab")
    (bert / "tokenizer.json").unlink()
    lines = (bert / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (bert / "vocab.txt").write_text("\n".join([*lines, lines[7]]) + "\n", encoding="utf-8")
    llama = {
        "model_type": "llama", "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
        "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 64,
        "bos_token_id": 0, "eos_token_id": 0,
    }  # fmt: skip
    for folder, change in (
        ("llama_bos", {"bos_token_id": 1e6}),
        ("llama_eos", {"eos_token_id": -5}),
        ("llama_context", {"max_position_embeddings": 1e12}),
        ("hf_listed", {"model_type": ["gpt2"]}),
    ):
        (data / folder).mkdir()
        shutil.copy(lm / "tokenizer.json", data / folder)
        (data / folder / "config.json").write_text(json.dumps({**llama, **change}), encoding="utf-8")


def bad_files(tmp: Path, data: Path) -> None:
    """The bad (and a few good) input files the rows name, written in the test's folder."""
    texts = {
        "empty.txt": "",
        "p.txt": "a few words\n",
        "bad.yaml": "model:\n  d_model: 64\n  n_head: 4\n",
        "broken.yaml": "model:\n  d_model: [64\n",
        "short.tsv": "good\tpositive\nbad\tnegative\nfine\n",
        "maybe.tsv": "sentence\tlabel\ngood\tpositive\nso so\tmaybe\n",
        "empty.tsv": "sentence\tlabel\n \tpositive\n",
        "bad.jsonl": '{"text": "good", "label": "positive"}\n{"text": "bad" "label": 0}\n',
        "one_label.tsv": "sentence\tlabel\ngood\tpositive\nfine\tpositive\n",
        "train.txt": "good\tpositive\nbad\tnegative\n",
        "hf_t5/config.json": '{"model_type": "t5"}\n',
        "hf_broken/config.json": '{"model_type": \n',
        "hf_gpt2/config.json": '{"model_type": "gpt2"}\n',
        "inf.yaml": "train:\n  clip_norm: .inf\n",
        "alias.yaml": "model:\n  d_model: &w 64\n  d_ff: *w\n",
        "deep_run/config.json": "[" * 100_000,
        "hf_deep/config.json": "[" * 100_000,
        "bom.txt": "\ufeffa b\n",
    }
    for name, text in texts.items():
        (tmp / name).parent.mkdir(exist_ok=True)
        (tmp / name).write_text(text, encoding="utf-8")
    (tmp / "latin1.txt").write_bytes(b"fine\nGr\xfc\xdfe\n")
    vector_files(tmp)
    tag_files(tmp)
    alibi = shutil.copytree(data / "lm_run", tmp / "alibi_run", ignore=shutil.ignore_patterns("checkpoints"))
    config = json.loads((alibi / "config.json").read_text(encoding="utf-8"))
    config["model"]["position"] = "alibi"
    (alibi / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp / "folder.tsv").mkdir()
    src, tgt = (data / "train.src").read_text(), (data / "train.tgt").read_text()
    (tmp / "short.tgt").write_text("".join(tgt.splitlines(keepends=True)[:-1]))
    lines = src.splitlines()
    lines[6] = " ".join(["a"] * 600)
    (tmp / "long.src").write_text("\n".join(lines) + "\n")
    pairs = zip(src.splitlines(), tgt.splitlines(), strict=True)
    (tmp / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    image_files(tmp)
    os.mkfifo(tmp / "fifo")
    os.mkfifo(tmp / "fifo.tsv")
    (tmp / "big.txt").write_text("a few words\n" * 3000)
    (tmp / "wide.src").write_text("a b\nc d\n" + "e" * 400 + "\n")
    (tmp / "dangling.src").symlink_to(tmp / "nowhere.src")
    (tmp / "loop.src").symlink_to(tmp / "loop.src")
    huge = tmp / "huge_vocab"
    huge.mkdir()
    shutil.copy(data / "lm_run" / "model.safetensors", huge)
    config = json.loads((data / "lm_run" / "config.json").read_text(encoding="utf-8"))
    config["model"]["vocab_size"] = 10**9
    (huge / "config.json").write_text(json.dumps(config), encoding="utf-8")
    draft_runs(tmp, data / "lm_run")
    os.link(data / "train.tgt", tmp / "hard.tgt")
    (tmp / "link.src").symlink_to(data / "train.src")
    (tmp / "dangling").symlink_to(tmp / "nothing")
    (tmp / "loop").symlink_to(tmp / "loop")
    nul_files(tmp)
    linked_runs(tmp, data / "lm_run")


def nul_files(tmp: Path) -> None:
    """Texts with a NUL byte on their second line: plain text, a TSV file, CoNLL-U."""
    (tmp / "nul.txt").write_bytes(b"a few words\nand a\0NUL\n")
    (tmp / "nul.tsv").write_bytes(b"good\tpositive\nba\0d\tnegative\n")
    good = conllu_word(1, "the", "DET").encode()
    (tmp / "tag_nul.conllu").write_bytes(good + conllu_word(2, "c\0t", "NOUN").encode() + b"\n")


def linked_runs(tmp: Path, lm: Path) -> None:
    """Symbolic links where a run is written, each to ``sentinel.txt`` (or ``sentinel_dir/``)
    outside the run: copies of the lm run whose ``train_log.csv``, ``checkpoints`` or
    ``model.before-average.safetensors`` (the weights ``average`` keeps) is a link, a link to the
    run folder itself, a link to an empty folder as a new run's ``--out``, and a link as
    ``evaluate --out``."""
    (tmp / "sentinel.txt").write_text("outside the run\n")
    (tmp / "sentinel_dir").mkdir()
    for name in ("train_log.csv", "model.before-average.safetensors", "checkpoints"):
        run = shutil.copytree(lm, tmp / f"linked_{name}", ignore=shutil.ignore_patterns(".lock"))
        if name == "checkpoints":
            shutil.rmtree(run / name)
            (run / name).symlink_to(tmp / "sentinel_dir", target_is_directory=True)
        else:
            (run / name).unlink(missing_ok=True)
            (run / name).symlink_to(tmp / "sentinel.txt")
    (tmp / "run_link").symlink_to(tmp / "linked_train_log.csv", target_is_directory=True)
    (tmp / "out_link").symlink_to(tmp / "sentinel_dir", target_is_directory=True)
    (tmp / "hyp_link").symlink_to(tmp / "sentinel.txt")


def draft_runs(tmp: Path, lm: Path) -> None:
    """Copies of the lm run for ``--draft``: ``other_vocab_run``, whose tokenizer has two ids
    swapped, and ``windowed_run``, with windowed attention (``attn_window``)."""
    other = shutil.copytree(lm, tmp / "other_vocab_run", ignore=shutil.ignore_patterns("checkpoints"))
    tokenizer = json.loads((other / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[-2:]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    windowed = shutil.copytree(lm, tmp / "windowed_run", ignore=shutil.ignore_patterns("checkpoints"))
    config = json.loads((windowed / "config.json").read_text(encoding="utf-8"))
    config["model"]["attn_window"] = 4
    (windowed / "config.json").write_text(json.dumps(config), encoding="utf-8")


def vector_files(tmp: Path) -> None:
    """Bad word vectors files: rows of different lengths, headers that disagree with the rows
    (their count, their width), a word that is not UTF-8 (text and binary), a value that is not a
    number, and a binary file cut inside a row."""
    texts = {
        "vec_ragged.txt": "good 0.1 0.2\nbad 0.3\n",
        "vec_count.txt": "3 2\ngood 0.1 0.2\nbad 0.3 0.4\n",
        "vec_width.txt": "2 3\ngood 0.1 0.2\nbad 0.3 0.4\n",
        "vec_value.txt": "good 0.1 0.2\nbad 0.3 zero\n",
        "vec_nan.txt": "good 0.1 0.2\nbad 0.3 nan\n",
        "vec_inf.txt": "good 0.1 0.2\nbad -inf 0.4\n",
        "vec_1e999.txt": "good 0.1 0.2\nbad 1e999 0.4\n",
        "vec_nul.txt": "good 0.1 0.2\nb\0d 0.3 0.4\n",
    }
    for name, text in texts.items():
        (tmp / name).write_text(text, encoding="utf-8")
    (tmp / "vec_latin1.txt").write_bytes(b"good 0.1 0.2\nGr\xfc\xdfe 0.3 0.4\n")
    row = b"good " + bytes(8)
    (tmp / "vec_latin1.bin").write_bytes(b"2 2\n" + row + b"\nGr\xfc\xdfe " + bytes(8))
    (tmp / "vec_cut.bin").write_bytes(b"2 2\n" + row + b"\nbad " + bytes(5))


def conllu_word(ident: int, form: str, upos: str) -> str:
    return f"{ident}\t{form}\t{form}\t{upos}\t_\t_\t0\tdep\t_\t_\n"


def tag_files(tmp: Path) -> None:
    """Tagged files for ``train tag``: good CoNLL-U (DET and NOUN) and a good column file, a
    CoNLL-U line of 8 fields, a sentence of comments only, a dev tag (INTJ, line 4) the training
    file lacks."""
    good = conllu_word(1, "the", "DET") + conllu_word(2, "cat", "NOUN") + "\n"
    texts = {
        "tag_good.conllu": good * 2,
        "tag_pairs.txt": "the DET\ncat NOUN\n\na DET\ndog NOUN\n",
        "tag_cols.conllu": conllu_word(1, "the", "DET") + "2\tcat\tcat\tNOUN\t_\t_\t0\tdep\n",
        "tag_empty.conllu": "# sent_id = 1\n# text = nothing\n\n" + good,
        "tag_unseen.conllu": good + conllu_word(1, "oh", "INTJ"),
    }
    for name, text in texts.items():
        (tmp / name).write_text(text, encoding="utf-8")


def image_files(tmp: Path) -> None:
    """Image folders for ``train image --data`` (``imgs_bad`` holds a corrupt PNG, ``imgs_empty`` an
    empty class folder, ``imgs_one`` one class, ``imgs_new`` a class no digit run has), a truncated
    PNG, one digit-like picture in several modes and sizes (``mixed/``), and a ``ViTModel`` folder."""
    grey = np.random.default_rng(0).integers(0, 256, (8, 8), dtype=np.uint8)
    for folder, classes in (("imgs_bad", "ab"), ("imgs_empty", "a"), ("imgs_one", "a"), ("imgs_new", "1x")):
        for name in classes:
            (tmp / folder / name).mkdir(parents=True)
            Image.fromarray(grey).save(tmp / folder / name / "0.png")
    (tmp / "imgs_bad" / "b" / "1.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (tmp / "imgs_empty" / "b").mkdir()
    Image.fromarray(grey).resize((40, 40)).save(tmp / "big.png")
    (tmp / "cut.png").write_bytes((tmp / "big.png").read_bytes()[:60])
    (tmp / "mixed").mkdir()
    Image.fromarray(grey).save(tmp / "mixed" / "l.png")
    Image.fromarray(np.stack([grey] * 3, axis=-1)).save(tmp / "mixed" / "rgb.png")
    Image.fromarray(np.stack([grey] * 3 + [grey // 2], axis=-1), mode="RGBA").save(tmp / "mixed" / "rgba.png")
    Image.fromarray(grey.astype(np.uint16) * 257).save(tmp / "mixed" / "wide.png")
    Image.fromarray(grey).convert("P").save(tmp / "mixed" / "palette.png")
    Image.fromarray(grey).resize((24, 24), Image.Resampling.NEAREST).save(
        tmp / "mixed" / "big.jpg", quality=100
    )
    (tmp / "hf_vitmodel").mkdir()
    (tmp / "hf_vitmodel" / "config.json").write_text(
        '{"model_type": "vit", "hidden_size": 8, "num_attention_heads": 2}'
    )
    save_file({"embeddings.cls_token": torch.zeros(1, 1, 8)}, str(tmp / "hf_vitmodel" / "model.safetensors"))


@pytest.fixture
def paths(runs: Paths, tmp_path: Path) -> Paths:
    """The module's runs and this test's folder, with the bad files in it."""
    bad_files(tmp_path, runs.data)
    return dataclasses.replace(runs, tmp=tmp_path)


# ---------------------------------------------------------------------------------------------
# Command lines that are refused


@dataclass(frozen=True)
class Cli:
    """A command line refused in one line that holds ``words``; ``stdin`` is its standard input,
    ``env`` the environment variables it runs with (the input limits)."""

    family: str
    name: str
    argv: list[str]
    words: list[str]
    stdin: bytes = b""
    env: dict[str, str] = dataclasses.field(default_factory=dict)


def vec_train(name: str, *extra: str) -> list[str]:
    """``train classify`` with the word vectors file ``{tmp}/name``."""
    return cls_train("--tokenizer", "word", "--word-vectors", f"{{tmp}}/{name}", *extra)


def tr_train(*extra: str, src: str = "{data}/train.src", tgt: str = "{data}/train.tgt") -> list[str]:
    return tiny_args(Path(src), Path(tgt), Path("{tmp}/out"), *extra)


def evaluate_out(out: str, *extra: str) -> list[str]:
    """``vaswani evaluate`` of the translation run on its own training pair, hypotheses to ``out``."""
    return [
        "evaluate",
        "{tr}",
        "--src",
        "{data}/train.src",
        "--ref",
        "{data}/train.tgt",
        "--out",
        out,
        *extra,
    ]


def lm_train(*extra: str, text: str = "{data}/lm.txt") -> list[str]:
    return tiny_lm_args(Path(text), Path("{tmp}/out"), *extra)


def mlm_train(*extra: str, text: str = "{data}/repeated.txt", out: str = "{tmp}/out") -> list[str]:
    return tiny_mlm_args(Path(text), Path(out), *extra)


def cls_train(*extra: str, train: str = "{data}/train.tsv", dev: str = "{data}/dev.tsv") -> list[str]:
    return tiny_classify_args(Path(train), Path(dev), Path("{tmp}/out"), *extra)


def image_train(data: str) -> list[str]:
    return ["train", "image", "--data", data, "--out", "{tmp}/out", "--image-size", "8", "--patch-size", "4"]


def pairs_train(*extra: str) -> list[str]:
    return ["train", "translation", "--pairs", "{tmp}/pairs.tsv", "--out", "{tmp}/out", *extra]


def cls_init(init: str) -> list[str]:
    return [
        "train", "classify", "--train", "{data}/train.tsv", "--dev", "{data}/dev.tsv", "--out", "{tmp}/out",
        "--init", init, "--quiet",
    ]  # fmt: skip


def tag_train(
    *extra: str, train: str = "{tmp}/tag_good.conllu", dev: str = "{tmp}/tag_good.conllu"
) -> list[str]:
    """``train tag`` of a one-layer model from scratch, one step."""
    return [
        "train", "tag", "--train", train, "--dev", dev, "--out", "{tmp}/out", "--d-model", "16",
        "--heads", "2", "--d-ff", "32", "--layers", "1", "--vocab-size", "60", "--max-len", "16",
        "--max-steps", "1", "--quiet", "--no-bf16", *extra,
    ]  # fmt: skip


def lm_init(init: str, *extra: str) -> list[str]:
    return ["train", "lm", "--init", init, "--text", "{data}/lm.txt", "--out", "{tmp}/out", "--quiet", *extra]


def draft(target: str, *extra: str) -> list[str]:
    """``train lm --distill-from`` (the target's tokenizer: no --tokenizer flag)."""
    text = ["--text", "{data}/lm.txt", "--out", "{tmp}/out", "--quiet"]
    return ["train", "lm", "--distill-from", target, *text, *extra]


def decode(*flags: str) -> list[str]:
    """``translate`` with decoding flags, which are checked before the run is loaded."""
    return ["translate", "{tr}", "a", *flags]


def generate(*args: str) -> list[str]:
    return ["generate", "{lm}", *args]


def attention(run: str, text: str, *flags: str) -> list[str]:
    return ["attention", run, text, "--out", "{tmp}/a.png", *flags]


RESUMED = "a resumed run keeps its own settings"
NEWER = ["format_version 2", "upgrade"]

CLI = [
    # train translation, translate
    Cli("translation", "unequal line counts", tr_train(tgt="{tmp}/short.tgt"), ["short.tgt", "100", "99"]),
    Cli("translation", "empty file", tr_train(src="{tmp}/empty.txt"), ["empty.txt", "empty"]),
    Cli("translation", "missing file", tr_train(src="{tmp}/nope.src"), ["nope.src", "no such file"]),
    Cli("translation", "directory as a file", tr_train(src="{tmp}"), ["{tmp}", "is a directory"]),
    Cli("translation", "not UTF-8", tr_train(src="{tmp}/latin1.txt"), ["latin1.txt:2", "UTF-8"]),
    Cli("translation", "line longer than max_len (refused)", tr_train(src="{tmp}/long.src"),
        ["long.src:7", "max_len"]),
    Cli("translation", "unknown config field", tr_train("--config", "{tmp}/bad.yaml"),
        ["bad.yaml", "model.n_head"]),
    Cli("translation", "broken YAML", tr_train("--config", "{tmp}/broken.yaml"), ["broken.yaml:", "YAML"]),
    Cli("translation", "heads do not divide d_model", tr_train("--heads", "5"), ["model.n_heads", "divide"]),
    Cli("translation", "relative tables that cannot fit",
        tr_train("--position", "relative", "--rel-clip", "1000000000"),
        ["does not fit in memory", "model.rel_clip=1000000000"]),
    Cli("translation", "attention window 0", tr_train("--attn-window", "0"), ["model.attn_window", ">= 1"]),
    Cli("translation", "negative steps", tr_train("--max-steps", "-1"), ["train.max_steps", "> 0"]),
    Cli("translation", "--src without --tgt", ["train", "translation", "--src", "{data}/train.src"],
        ["--src and --tgt"]),
    Cli("translation", "--pairs and --src",
        pairs_train("--src", "{data}/train.src", "--tgt", "{data}/train.tgt"), ["--pairs", "--src"]),
    Cli("translation", "one column", pairs_train("--columns", "0"), ["--columns", "'0'"]),
    Cli("translation", "the same column twice", pairs_train("--columns", "1,1"), ["data.columns", "[1, 1]"]),
    Cli("translation", "a column the pairs lack", pairs_train("--columns", "0,4"),
        ["pairs.tsv:1", "expected at least 5"]),
    Cli("translation", "--objective mrt without --init", tr_train("--objective", "mrt"),
        ["data.objective", "mrt fine-tunes a trained run", "--init RUN_DIR"]),
    Cli("translation", "a model flag with --init", tr_train("--init", "{tr}", "--d-model", "64"),
        ["--d-model", "--init"]),
    Cli("translation", "--arch rnn with word vectors", tr_train("--arch", "rnn", "--freeze-embeddings"),
        ["data.word_vectors", "Transformer"]),
    Cli("translation", "resume from nothing", ["train", "translation", "--resume", "{tmp}/none"],
        ["none", "no such run"]),
    Cli("translation", "resume with a model flag",
        ["train", "translation", "--resume", "{tr}", "--d-model", "64"],
        ["--d-model", RESUMED]),
    Cli("translation", "resume with a data flag",
        ["train", "translation", "--resume", "{tr}", "--src", "{data}/train.src"], ["--src", RESUMED]),
    Cli("translation", "resume a checkpoint of a newer vaswani",
        ["train", "translation", "--resume", "{future}"],
        ["step_00000002/trainer_state.json", "unknown field 'ema_decay'", "newer vaswani"]),
    Cli("translation", "translate with no run", ["translate", "{tmp}/none", "a b"], ["none", "no such run"]),
    Cli("translation", "translate with a folder that is not a run", ["translate", "{tmp}", "a b"],
        ["{tmp}", "config.json"]),
    Cli("translation", "translate with an lm run", ["translate", "{lm}", "a"],
        ["lm_run", "'lm'", "'translation'"]),
    Cli("translation", "translate with a run of a newer format", ["translate", "{newer}", "a"],
        ["newer_run/config.json", *NEWER]),
    Cli("translation", "translate a line longer than max_len (refused)", ["translate", "{tr}", "a " * 600],
        ["input line 1", "max_len=512"]),
    Cli("translation", "translate non-UTF-8 standard input", ["translate", "{tr}"], ["<stdin>:2", "UTF-8"],
        stdin=b"a b\nGr\xfc\xdfe\n"),
    Cli("translation", "translate --batch-size 0", ["translate", "{tr}", "a", "--batch-size", "0"],
        ["--batch-size"]),
    Cli("translation", "beam 0", decode("--beam", "0"), ["--beam", ">= 1"]),
    Cli("translation", "n-best above beam", decode("--beam", "2", "--n-best", "3"),
        ["--n-best", "--beam (2)"]),
    Cli("translation", "beam and sampling", decode("--beam", "2", "--top-k", "5"), ["--beam", "sampling"]),
    Cli("translation", "length penalty without beam", decode("--length-penalty", "1"),
        ["--length-penalty", "--beam"]),
    Cli("translation", "unknown length penalty", decode("--beam", "2", "--length-penalty-kind", "wu"),
        ["gnmt", "simple", "'wu'"]),
    Cli("translation", "seed without sampling", decode("--seed", "1"), ["--seed", "--temperature"]),
    Cli("translation", "Mask-Predict with no iterations", ["translate", "{nat}", "a", "--iterations", "0"],
        ["--iterations", "between 1 and 1000", "got 0"]),
    Cli("translation", "a length beam above a nat run's length classes",
        ["translate", "{nat}", "a", "--length-beam", "40"], ["--length-beam 40", "23 target lengths"]),
    Cli("translation", "Mask-Predict's flags with an autoregressive run", decode("--iterations", "3"),
        ["--iterations", "autoregressive"]),
    Cli("translation", "an unknown ranking of Mask-Predict's candidates",
        ["translate", "{nat}", "a", "--rank-by", "sum"], ["--rank-by must be one of average, joint", "sum"]),
    Cli("translation", "a ranking of candidates with an autoregressive run", decode("--rank-by", "joint"),
        ["--rank-by", "autoregressive"]),
    Cli("translation", "a teacher's ranking without a teacher",
        ["translate", "{nat}", "a", "--rank-by", "teacher"], ["--rank-by teacher needs", "--teacher RUN"]),
    Cli("translation", "a teacher with another ranking",
        ["translate", "{nat}", "a", "--teacher", "{tr}", "--rank-by", "joint"], ["--teacher", "not joint"]),
    Cli("translation", "a teacher that is a language model", ["translate", "{nat}", "a", "--teacher", "{lm}"],
        ["lm_run", "task 'lm'"]),
    Cli("translation", "a teacher for an autoregressive run", decode("--teacher", "{tr}"),
        ["--teacher", "autoregressive"]),
    Cli("translation", "beam search with a nat run", ["translate", "{nat}", "a", "--beam", "2"],
        ["nat run", "--iterations"]),
    Cli("translation", "distillation from a run of another vocabulary",
        ["train", "nat", "--src", "{data}/train.src", "--tgt", "{data}/train.tgt", "--out", "{tmp}/out",
         "--vocab-size", "20", "--max-steps", "1", "--distill-from", "{tr}", "--quiet"],
        ["--distill-from", "translation_run", "source vocabulary", "differs from this run's"]),
    Cli("translation", "a nat run started from a translation run",
        ["train", "nat", "--init", "{tr}", "--out", "{tmp}/out", "--max-steps", "1", "--quiet"],
        ["translation_run", "task 'translation'"]),
    Cli("translation", "minimum risk training of a nat run",
        ["train", "nat", "--init", "{nat}", "--objective", "mrt", "--out", "{tmp}/out", "--quiet"],
        ["--objective", "masked-token loss"]),
    Cli("translation", "clipping at infinity (a flag)", tr_train("--clip-norm", "inf"),
        ["--clip-norm", "train.clip_norm", "finite", "inf"]),
    Cli("translation", "clipping at infinity (a config file)", tr_train("--config", "{tmp}/inf.yaml"),
        ["inf.yaml", "train.clip_norm", "finite"]),
    Cli("translation", "a seed past 32 bits", tr_train("--seed", str(2**70)),
        ["--seed", "train.seed", "[0, "]),
    Cli("translation", "a negative data seed", tr_train("--data-seed", "-1"), ["--data-seed", "data.seed"]),
    Cli("translation", "YAML aliases in a config file", tr_train("--config", "{tmp}/alias.yaml"),
        ["alias.yaml:2", "aliases"]),
    Cli("translation", "a config.json nested 100000 deep", ["translate", "{tmp}/deep_run", "a"],
        ["deep_run/config.json", "nested too deeply"]),
    Cli("translation", "translate an empty text", ["translate", "{tr}", "a", ""], ["input line 2 is empty"]),
    Cli("translation", "translate an empty line of standard input", ["translate", "{tr}"],
        ["input line 2 is empty"], stdin=b"a b\n \nc\n"),
    # train lm, generate
    Cli("lm", "a NaN weight in a run", ["generate", "{data}/nan_run", "a"],
        ["nan_run/model.safetensors", "tensor 'blocks.layers.0.self_attn.out_proj.weight'",
         "has non-finite values (nan)"]),
    Cli("lm", "an int8 weight in a run", ["generate", "{data}/int8_run", "a"],
        ["int8_run/model.safetensors", "out_proj.weight' has dtype int8, the model expects float32"]),
    Cli("lm", "a bool weight in a run", ["generate", "{data}/bool_run", "a"],
        ["bool_run/model.safetensors", "out_proj.weight' has dtype bool, the model expects float32"]),
    Cli("lm", "--threads 5000", lm_train("--threads", "5000"), ["--threads", "must be at most", "got 5000"]),
    Cli("lm", "--nproc 1000", lm_train("--nproc", "1000"), ["--nproc", "must be in [1, ", "got 1000"]),
    Cli("lm", "missing text", lm_train(text="{tmp}/nope.txt"), ["nope.txt", "no such file"]),
    Cli("lm", "--lora 0", lm_train("--lora", "0"), ["--lora", "train.lora_rank", "must be > 0"]),
    Cli("lm", "--lora without --init", lm_train("--lora", "4"), ["--lora", "start from one with --init"]),
    Cli("lm", "--lora-alpha without --lora", lm_train("--lora-alpha", "4"),
        ["--lora-alpha", "train.lora_alpha", "need a rank"]),
    Cli("lm", "an unknown --lora-targets", lm_train("--lora", "4", "--lora-targets", "query"),
        ["--lora-targets", "each must be one of", "'query'"]),
    Cli("lm", "non-UTF-8 text", lm_train(text="{tmp}/latin1.txt"), ["latin1.txt:2", "UTF-8"]),
    Cli("lm", "empty text", lm_train(text="{tmp}/empty.txt"), ["empty.txt", "empty"]),
    Cli("lm", "too little text", lm_train(text="{tmp}/p.txt"), ["context"]),
    Cli("lm", "heads do not divide d_model", lm_train("--heads", "3"), ["model.n_heads", "d_model=32"]),
    Cli("lm", "attention window 0", lm_train("--attn-window", "0"), ["model.attn_window"]),
    Cli("lm", "attention window past the context", lm_train("--attn-window", "999"),
        ["model.attn_window", "max_len="]),
    Cli("lm", "zero context", lm_train("--max-len", "0"), ["model.max_len", "> 0"]),
    Cli("lm", "negative learning rate", lm_train("--lr", "-1"), ["train.lr", "> 0"]),
    Cli("lm", "resume nothing", ["train", "lm", "--resume", "{tmp}/none"], ["no such run"]),
    Cli("lm", "--distill-from a translation run", draft("{tr}"),
        ["--distill-from needs a run of task lm", "translation"]),
    Cli("lm", "--distill-from with --init", lm_init("{lm}", "--distill-from", "{lm}"),
        ["data.distill_from", "--distill-from or --init"]),
    Cli("lm", "--distill-from with --vocab-size", draft("{lm}", "--vocab-size", "50"),
        ["--vocab-size", "its target's tokenizer"]),
    Cli("lm", "resume with --no-bf16", ["train", "lm", "--resume", "{lm}", "--no-bf16"], ["--bf16", RESUMED]),
    Cli("lm", "prompt longer than the context (refused: only generation slides past it)",
        generate("the cat " * 5), ["prompt 1", "context of 32"]),
    Cli("lm", "prompt and prompt file", generate("x", "--prompt-file", "{tmp}/p.txt"), ["--prompt-file"]),
    Cli("lm", "missing prompt file", generate("--prompt-file", "{tmp}/nope.txt"), ["nope.txt", "no such"]),
    Cli("lm", "no samples", generate("a", "--num-samples", "0"), ["--num-samples"]),
    Cli("lm", "no new tokens", generate("a", "--max-new-tokens", "0"), ["--max-new-tokens"]),
    Cli("lm", "top-p above 1", generate("a", "--top-p", "1.5"), ["--top-p", "1.5"]),
    Cli("lm", "negative temperature", generate("a", "--temperature", "-1"), ["--temperature"]),
    Cli("lm", "top-k 0", generate("a", "--top-k", "0"), ["--top-k"]),
    Cli("lm", "negative top-k", generate("a", "--top-k", "-3"), ["--top-k", ">= 1"]),
    Cli("lm", "a sampling seed past 64 bits", generate("a", "--seed", str(2**70)), ["--seed", "at most"]),
    Cli("lm", "10**30 new tokens", generate("a", "--max-new-tokens", str(10**30)),
        ["--max-new-tokens", "at most"]),
    Cli("lm", "infinite temperature", generate("a", "--temperature", "inf"), ["--temperature", "finite"]),
    Cli("lm", "an empty stop string", generate("a", "--stop", ""), ["--stop", "empty"]),
    Cli("lm", "a NaN learning rate", lm_train("--lr", "nan"), ["--lr", "train.lr"]),
    Cli("lm", "generate with no run", ["generate", "{tmp}/none", "a"], ["none", "no such run"]),
    Cli("lm", "--draft with sampling", generate("a", "--draft", "{lm}"),
        ["--draft", "greedily", "--temperature 0"]),
    Cli("lm", "--draft with two prompts", generate("a", "b", "--draft", "{lm}", "--temperature", "0"),
        ["--draft", "one prompt", "got 2"]),
    Cli("lm", "--draft of another tokenizer",
        generate("a", "--draft", "{tmp}/other_vocab_run", "--temperature", "0"),
        ["--draft", "other_vocab_run", "tokenizer", "same vocabulary"]),
    Cli("lm", "--draft of a windowed run",
        generate("a", "--draft", "{tmp}/windowed_run", "--temperature", "0"),
        ["--draft", "attn_window", "full attention"]),
    Cli("lm", "--draft of a translation run", generate("a", "--draft", "{tr}", "--temperature", "0"),
        ["translation_run", "'translation'"]),
    Cli("lm", "--draft-tokens without --draft", generate("a", "--draft-tokens", "3"),
        ["--draft-tokens", "--draft"]),
    Cli("lm", "--draft-tokens 0",
        generate("a", "--draft", "{lm}", "--temperature", "0", "--draft-tokens", "0"),
        ["--draft-tokens", ">= 1"]),
    Cli("lm", "--quantize on a classify run",
        ["evaluate", "{cls}", "--labeled", "{tmp}/short.tsv", "--quantize", "int8"],
        ["classify_run", "--quantize", "not to a classify run"]),
    Cli("lm", "--dtype on an mlm run", ["evaluate", "{mlm}", "--text", "{tmp}/p.txt", "--dtype", "bf16"],
        ["mlm_run", "--dtype", "not to a mlm run"]),
    Cli("lm", "generate with a translation run", ["generate", "{tr}", "a"],
        ["translation_run", "'translation'"]),
    Cli("lm", "generate with a run of a newer format", ["generate", "{newer}", "a"], NEWER),
    Cli("lm", "--init of a classify run", lm_init("{cls}"), ["classify_run", "'classify'", "--init", "lm"]),
    Cli("lm", "--init of nothing", lm_init("{tmp}/none"), ["none", "no such run"]),
    Cli("lm", "a model flag with --init", lm_init("{lm}", "--layers", "3"), ["--layers", "--init"]),
    Cli("lm", "a tokenizer flag with --init", lm_init("{lm}", "--vocab-size", "99"),
        ["--vocab-size", "own tokenizer"]),
    Cli("lm", "--init without new text", ["train", "lm", "--init", "{lm}", "--out", "{tmp}/out"],
        ["data.text", "--text"]),
    # train mlm
    Cli("mlm", "missing text", mlm_train(text="{tmp}/nope.txt"), ["nope.txt", "no such file"]),
    Cli("mlm", "non-UTF-8 text", mlm_train(text="{tmp}/latin1.txt"), ["latin1.txt:2", "UTF-8"]),
    Cli("mlm", "mask probability 1", mlm_train("--mask-prob", "1"), ["data.mask_prob"]),
    Cli("mlm", "zero d_model", mlm_train("--d-model", "0"), ["model.d_model", "> 0"]),
    Cli("mlm", "negative d_ff", mlm_train("--d-ff", "-8"), ["model.d_ff", "> 0"]),
    Cli("mlm", "an existing run as --out", mlm_train(out="{cls}"), ["classify_run", "already exists"]),
    Cli("mlm", "resume nothing", ["train", "mlm", "--resume", "{tmp}/none"], ["no such run"]),
    Cli("mlm", "resume with --mask-prob", ["train", "mlm", "--resume", "{mlm}", "--mask-prob", "0.2"],
        ["--mask-prob", RESUMED]),
    Cli("mlm", "--nsp on a text of one document", mlm_train("--nsp"), ["single document", "blank line"]),
    Cli("mlm", "--nsp without the pooler", mlm_train("--nsp", "--no-pooler"), ["model.pooler", "--nsp"]),
    Cli("mlm", "--nsp with one segment", mlm_train("--nsp", "--type-vocab-size", "1"),
        ["model.type_vocab_size", "--nsp", "two segments"]),
    Cli("mlm", "--nsp with max_len 4", mlm_train("--nsp", "--max-len", "4"), ["model.max_len", ">= 5"]),
    Cli("mlm", "resume with --nsp", ["train", "mlm", "--resume", "{mlm}", "--nsp"], ["--nsp", RESUMED]),
    # fill-mask
    Cli("fill-mask", "no [MASK]", ["fill-mask", "{mlm}", "no mask here"], ["[MASK]"]),
    Cli("fill-mask", "top-k 0", ["fill-mask", "{mlm}", "a [MASK]", "--top-k", "0"], ["--top-k"]),
    Cli("fill-mask", "text longer than max_len (refused)", ["fill-mask", "{mlm}", "one " * 30 + "[MASK]"],
        ["max_len of 24"]),
    Cli("fill-mask", "no such run", ["fill-mask", "{tmp}/none", "a [MASK]"], ["none", "no such run"]),
    Cli("fill-mask", "an encoder run", ["fill-mask", "{enc}", "a [MASK]"],
        ["encoder_run", "'encoder'", "mlm"]),
    Cli("fill-mask", "a classify run", ["fill-mask", "{cls}", "a [MASK]"],
        ["classify_run", "'classify'", "mlm"]),
    # train classify, classify
    Cli("classify", "short training row", cls_train(train="{tmp}/short.tsv"),
        ["short.tsv:3", "missing column"]),
    Cli("classify", "dev label absent from training", cls_train(dev="{tmp}/maybe.tsv"),
        ["maybe.tsv:3", "'maybe'"]),
    Cli("classify", "empty text", cls_train(train="{tmp}/empty.tsv"), ["empty.tsv:2", "empty text"]),
    Cli("classify", "malformed JSON line", cls_train(train="{tmp}/bad.jsonl", dev="{tmp}/bad.jsonl"),
        ["bad.jsonl:2", "not valid JSON"]),
    Cli("classify", "missing training file", cls_train(train="{tmp}/nope.tsv"), ["nope.tsv", "no such file"]),
    Cli("classify", "directory as the training file", cls_train(train="{tmp}/folder.tsv"),
        ["folder.tsv", "is a directory"]),
    Cli("classify", "non-UTF-8 training file", cls_train("--format", "tsv", train="{tmp}/latin1.txt"),
        ["latin1.txt:2", "UTF-8"]),
    Cli("classify", "unknown column name", cls_train("--text-column", "review"),
        ["train.tsv:1", "no column named 'review'"]),
    Cli("classify", "three text columns",
        cls_train("--text-column", "0", "--text-column", "0", "--text-column", "1"), ["text_columns"]),
    Cli("classify", "one label only", cls_train(train="{tmp}/one_label.tsv"),
        ["one_label.tsv", "two or more"]),
    Cli("classify", "unknown extension", cls_train(train="{tmp}/train.txt"), ["train.txt", "--format"]),
    Cli("classify", "no --dev", ["train", "classify", "--train", "{data}/train.tsv"], ["--dev"]),
    Cli("classify", "zero epochs", cls_train("--epochs", "0"), ["--epochs"]),
    Cli("classify", "zero batch size", cls_train("--batch-size", "0"), ["train.batch_size", "> 0"]),
    Cli("classify", "batches by tokens", cls_train("--batch-tokens", "512"),
        ["--batch-tokens", "--batch-size"]),
    Cli("classify", "a model flag with --init", cls_train("--init", "{mlm}", "--d-model", "64"),
        ["--d-model", "--init"]),
    Cli("classify", "--init of a translation run", cls_init("{tr}"), ["'translation'", "--init"]),
    Cli("classify", "--init of nothing", cls_init("{tmp}/none"), ["none", "no such run"]),
    Cli("classify", "--init of a classify run", cls_init("{cls}"), ["'classify'", "--init"]),
    Cli("classify", "a negative --lm-weight (GPT)", [*cls_init("{lm}"), "--lm-weight", "-1"],
        ["data.lm_weight", ">= 0"]),
    Cli("classify", "--lm-weight for a BERT", cls_train("--lm-weight", "0.3"),
        ["--lm-weight", "GPT classifier"]),
    Cli("classify", "--pool cls for a GPT", [*cls_init("{lm}"), "--pool", "cls"], ["--pool cls", "GPT"]),
    Cli("classify", "--pool last for a BERT", cls_train("--pool", "last"), ["--pool last", "BERT"]),
    Cli("classify", "resume nothing", ["train", "classify", "--resume", "{tmp}/none"], ["no such run"]),
    Cli("classify", "classify with an encoder run", ["classify", "{enc}", "a"], ["'encoder'", "classify"]),
    Cli("classify", "classify with a translation run", ["classify", "{tr}", "a"],
        ["'translation'", "classify"]),
    Cli("classify", "classify an empty text", ["classify", "{cls}", "good", " "], ["text 2 is empty"]),
    Cli("classify", "classify no text (empty standard input)", ["classify", "{cls}"], ["no text given"]),
    Cli("classify", "classify non-UTF-8 standard input", ["classify", "{cls}"], ["<stdin>:2", "UTF-8"],
        stdin=b"good\n\xff bad\n"),
    Cli("classify", "classify --batch-size 0", ["classify", "{cls}", "good", "--batch-size", "0"],
        ["--batch-size"]),
    # embed
    Cli("embed", "--out a .txt", ["embed", "{cls}", "a", "--out", "{tmp}/e.txt"], [".npy"]),
    Cli("embed", "a translation run", ["embed", "{tr}", "a"], ["'translation'", "embed"]),
    Cli("embed", "an lm run", ["embed", "{lm}", "a"], ["'lm'", "embed"]),
    Cli("embed", "no text (empty standard input)", ["embed", "{mlm}"], ["no text given"]),
    Cli("embed", "negative --dims", ["embed", "{mlm}", "a", "--dims", "-1"], ["--dims"]),
    # import-hf, export-hf
    Cli("interop", "import a missing folder", ["import-hf", "{tmp}/nope", "{tmp}/out"],
        ["nope", "no such folder"]),
    Cli("interop", "import a folder without config.json", ["import-hf", "{tmp}", "{tmp}/out"],
        ["no config.json"]),
    Cli("interop", "import an unsupported model_type", ["import-hf", "{tmp}/hf_t5", "{tmp}/out"],
        ["hf_t5/config.json", "'t5'", "supported"]),
    Cli("interop", "import a config.json that is not JSON", ["import-hf", "{tmp}/hf_broken", "{tmp}/out"],
        ["hf_broken/config.json", "not valid JSON"]),
    Cli("interop", "import a config.json nested 100000 deep", ["import-hf", "{tmp}/hf_deep", "{tmp}/out"],
        ["hf_deep/config.json", "nested too deeply"]),
    Cli("interop", "import GPT-2 without a tokenizer", ["import-hf", "{tmp}/hf_gpt2", "{tmp}/out"],
        ["hf_gpt2", "no tokenizer"]),
    Cli("interop", "a GPT-2 weight with inf", ["import-hf", "{data}/hf_inf", "{tmp}/out"],
        ["hf_inf/model.safetensors", "h.0.attn.c_proj.weight' has non-finite values (inf)"]),
    Cli("interop", "an int8 GPT-2 weight", ["import-hf", "{data}/hf_int8", "{tmp}/out"],
        ["hf_int8/model.safetensors", "h.0.attn.c_proj.weight' has dtype int8", "floating-point"]),
    Cli("interop", "two tokens of one id in tokenizer.json", ["import-hf", "{data}/hf_shared", "{tmp}/out"],
        ["hf_shared/tokenizer.json", "share id"]),
    Cli("interop", "a BERT vocab.txt that repeats a token", ["import-hf", "{data}/hf_vocab", "{tmp}/out"],
        ["hf_vocab/vocab.txt", "is on lines 8 and"]),
    Cli("interop", "a Llama BOS id of 1e6", ["import-hf", "{data}/llama_bos", "{tmp}/out"],
        ["llama_bos/config.json", "field 'bos_token_id'", "vocab_size=64", "got 1000000"]),
    Cli("interop", "a Llama EOS id of -5", ["import-hf", "{data}/llama_eos", "{tmp}/out"],
        ["llama_eos/config.json", "field 'eos_token_id'", "got -5"]),
    Cli("interop", "a Llama context of 1e12", ["import-hf", "{data}/llama_context", "{tmp}/out"],
        ["llama_context/config.json", "does not fit in memory", "max_position_embeddings=1000000000000"]),
    Cli("interop", "a model_type that is a list", ["import-hf", "{data}/hf_listed", "{tmp}/out"],
        ["hf_listed/config.json", "model_type ['gpt2'] is not supported"]),
    Cli("interop", "export a classify run", ["export-hf", "{cls}", "{tmp}/out"],
        ["'classify'", "cannot be exported"]),
    Cli("interop", "export into a run", ["export-hf", "{lm}", "{mlm}"], ["mlm_run", "already exists"]),
    Cli("interop", "export nothing", ["export-hf", "{tmp}/none", "{tmp}/out"], ["none", "no such run"]),
    Cli("interop", "export a run of a newer format", ["export-hf", "{newer}", "{tmp}/out"], NEWER),
    Cli("interop", "export-onnx an image run", ["export-onnx", "{img}", "{tmp}/out"],
        ["'image'", "have no ONNX export"]),
    Cli("interop", "export-onnx into a run", ["export-onnx", "{lm}", "{mlm}"], ["mlm_run", "already exists"]),
    Cli("interop", "export-onnx --force into a run", ["export-onnx", "{lm}", "{mlm}", "--force"],
        ["mlm_run", "is a run directory"]),
    Cli("interop", "export-peft a run without adapters", ["export-peft", "{lm}", "{tmp}/out"],
        ["lm_run", "not a LoRA run", "--lora R"]),
    Cli("interop", "export-ctranslate2 a language model", ["export-ctranslate2", "{lm}", "{tmp}/out"],
        ["lm_run", "only Transformer translation runs"]),
    # average
    Cli("average", "--last 0", ["average", "{tr}", "--last", "0"], ["--last", ">= 1"]),
    Cli("average", "more checkpoints than kept", ["average", "{tr}", "--last", "5"],
        ["2 checkpoints kept", "cannot average the last 5"]),
    Cli("average", "no checkpoints", ["average", "{enc}", "--last", "1"], ["encoder_run", "no checkpoints"]),
    Cli("average", "not a run", ["average", "{tmp}", "--last", "1"], ["config.json"]),
    Cli("average", "a run of a newer format", ["average", "{newer}", "--last", "1"], NEWER),
    # attention, plot
    Cli("plots", "attention into a .txt", ["attention", "{tr}", "a b", "--out", "{tmp}/a.txt"],
        ["a.txt", "image format"]),
    Cli("plots", "attention of a layer the model lacks", attention("{tr}", "a b", "--layers", "7"),
        ["layer 7", "0 to 1"]),
    Cli("plots", "attention with --layers not numbers", attention("{tr}", "a b", "--layers", "x"),
        ["--layers", "'x'"]),
    Cli("plots", "attention of a text longer than max_len", attention("{lm}", "a " * 40), ["max_len=32"]),
    Cli("plots", "attention of an empty text", attention("{lm}", ""), ["empty"]),
    Cli("plots", "attention of a part an mlm run lacks", [*attention("{mlm}", "a"), "--part", "cross"],
        ["--part cross", "a BERT run draws self"]),
    Cli("plots", "attention of an empty sentence pair", attention("{cls}", "good\t "), ["the text is empty"]),
    Cli("plots", "plot positions of an ALiBi run", ["plot", "positions", "{tmp}/alibi_run"],
        ["alibi_run", "positions 'alibi'", "not a table"]),
    Cli("plots", "plot of an unknown kind", ["plot", "curves", "{lm}"], ["KIND one of loss, positions"]),
    Cli("embed", "--word absent from a sentence", ["embed", "{mlm}", "--word", "one", "one two", "three"],
        ["text 2 does not contain the word 'one'"]),
    Cli("embed", "--word of spaces only", ["embed", "{mlm}", "--word", " ", "one"],
        ["--word ' ' has no word in it"]),
    Cli("embed", "--tokens with --out", ["embed", "{mlm}", "--tokens", "one", "--out", "{tmp}/v.npy"],
        ["--out", "--tokens"]),
    Cli("plots", "plot a folder that is not a run", ["plot", "{tmp}"], ["config.json"]),
    Cli("plots", "plot a run without a training log", ["plot", "{enc}"],
        ["train_log.csv", "no training log"]),
    Cli("plots", "plot into a .txt", ["plot", "{tr}", "--out", "{tmp}/p.txt"], ["p.txt", "image format"]),
    # evaluate
    Cli("evaluate", "--batch-size 0", ["evaluate", "{tr}", "--batch-size", "0"], ["--batch-size"]),
    Cli("evaluate", "--src without --ref", ["evaluate", "{tr}", "--src", "{data}/train.src"],
        ["--src and --ref"]),
    Cli("evaluate", "--src a directory", ["evaluate", "{tr}", "--src", "{tmp}", "--ref", "{data}/train.tgt"],
        ["is a directory"]),
    Cli("evaluate", "unequal --src and --ref",
        ["evaluate", "{tr}", "--src", "{data}/train.src", "--ref", "{tmp}/short.tgt"],
        ["short.tgt", "100", "99"]),
    Cli("evaluate", "a translation run with --text", ["evaluate", "{tr}", "--text", "{tmp}/p.txt"],
        ["--src", "--ref"]),
    Cli("evaluate", "an lm run without --text", ["evaluate", "{lm}"], ["--text"]),
    Cli("evaluate", "an lm run on a missing text", ["evaluate", "{lm}", "--text", "{tmp}/nope.txt"],
        ["nope.txt", "no such file"]),
    Cli("evaluate", "an mlm run without --text", ["evaluate", "{mlm}"], ["--text"]),
    Cli("evaluate", "an mlm run on an empty text", ["evaluate", "{mlm}", "--text", "{tmp}/empty.txt"],
        ["empty.txt", "empty"]),
    Cli("evaluate", "an encoder run", ["evaluate", "{enc}"], ["encoder", "embed"]),
    Cli("evaluate", "a classifier without --labeled", ["evaluate", "{cls}"], ["--labeled"]),
    Cli("evaluate", "a label absent from training", ["evaluate", "{cls}", "--labeled", "{tmp}/maybe.tsv"],
        ["maybe.tsv:3", "'maybe'"]),
    Cli("evaluate", "non-UTF-8 labeled file",
        ["evaluate", "{cls}", "--labeled", "{tmp}/latin1.txt", "--format", "tsv"], ["latin1.txt:2", "UTF-8"]),
    Cli("evaluate", "a run of a newer format", ["evaluate", "{newer}"], NEWER),
    # serve: refused before any port is bound
    Cli("serve", "a missing run directory", ["serve", "{tr}", "{tmp}/nope"],
        ["nope", "no such run directory"]),
    Cli("serve", "--max-batch 0", ["serve", "{tr}", "--max-batch", "0"], ["--max-batch", ">= 1", "got 0"]),
    Cli("serve", "a port out of range", ["serve", "{tr}", "--port", "70000"], ["--port", "0..65535"]),
    # train image, classify-image
    Cli("image", "image size not divisible by the patch size",
        ["train", "image", "--image-size", "10", "--patch-size", "4", "--out", "{tmp}/out"],
        ["--image-size", "model.image_size", "divisible by patch_size=4", "got 10"]),
    Cli("image", "an image size of 1e6", ["train", "image", "--image-size", "1000000", "--out", "{tmp}/out"],
        ["--image-size", "model.image_size", "(0, 4096]", "got 1000000"]),
    Cli("image", "patch positions that cannot fit",
        ["train", "image", "--image-size", "4096", "--patch-size", "1", "--d-model", "4096", "--heads", "8",
         "--out", "{tmp}/out"], ["does not fit in memory", "model.image_size=4096", "model.patch_size=1"]),
    Cli("image", "a run of another task to classify-image", ["classify-image", "{cls}", "{tmp}/empty.txt"],
        ["classify_run", "task 'classify'", "vaswani classify-image", "task image"]),
    Cli("image", "a non-image file to classify-image", ["classify-image", "{img}", "{tmp}/empty.txt"],
        ["empty.txt", "not a readable image"]),
    Cli("image", "a NaN validation fraction",
        ["train", "image", "--valid-fraction", "nan", "--out", "{tmp}/out"],
        ["--valid-fraction", "data.valid_fraction", "(0, 0.5)"]),
    Cli("image", "a missing image file", ["classify-image", "{img}", "{tmp}/nope.png"],
        ["nope.png", "no such image file"]),
    Cli("image", "--top-k 0", ["classify-image", "{img}", "{tmp}/nope.png", "--top-k", "0"],
        ["--top-k", ">= 1"]),
    Cli("image", "a truncated image file to classify-image", ["classify-image", "{img}", "{tmp}/cut.png"],
        ["cut.png", "not a readable image"]),
    Cli("image", "an unreadable file in --data", image_train("{tmp}/imgs_bad"),
        ["imgs_bad/b/1.png", "not a readable image"]),
    Cli("image", "an empty class folder in --data", image_train("{tmp}/imgs_empty"),
        ["imgs_empty/b", "empty class folder"]),
    Cli("image", "a single class in --data", image_train("{tmp}/imgs_one"),
        ["imgs_one", "only one class folder (a)", "at least two"]),
    Cli("image", "no such --data folder", image_train("{tmp}/nowhere"), ["nowhere", "no such image folder"]),
    Cli("image", "a folder of classes the run lacks to evaluate --data",
        ["evaluate", "{img}", "--data", "{tmp}/imgs_new"],
        ["imgs_new/x", "class 'x' is not one of the model's 10 classes"]),
    Cli("image", "a ViTModel folder with tensors missing to import-hf",
        ["import-hf", "{tmp}/hf_vitmodel", "{tmp}/out"],
        ["hf_vitmodel/model.safetensors", "tensor 'embeddings.position_embeddings' is missing"]),
    # resources and the operating system (issue 20): what is not a regular file, past a limit, too large
    Cli("translation", "a device as --src (/dev/zero)", tr_train(src="/dev/zero"),
        ["/dev/zero", "is a device"]),
    Cli("translation", "a FIFO without a writer as --src", tr_train(src="{tmp}/fifo"),
        ["fifo", "is a FIFO (named pipe)"]),
    Cli("translation", "a FIFO as --config", tr_train("--config", "{tmp}/fifo"), ["fifo", "FIFO"]),
    Cli("translation", "a dangling symbolic link as --src", tr_train(src="{tmp}/dangling.src"),
        ["dangling.src", "dangling symbolic link"]),
    Cli("translation", "a loop of symbolic links as --src", tr_train(src="{tmp}/loop.src"),
        ["loop.src", "loop of symbolic links"]),
    Cli("translation", "a path under a file as --src", tr_train(src="{tmp}/p.txt/x"),
        ["p.txt/x", "a part of the path is a file"]),
    Cli("translation", "standard input past the input limit", ["translate", "{tr}"],
        ["<stdin>", "input limit"], stdin=b"a b c\n" * 5000, env={"VASWANI_MAX_INPUT_BYTES": "20000"}),
    Cli("translation", "a line past the line limit", tr_train(src="{tmp}/wide.src"),
        ["wide.src:3", "a line of 400 characters", "VASWANI_MAX_LINE_CHARS"],
        env={"VASWANI_MAX_LINE_CHARS": "300"}),
    Cli("translation", "a bad VASWANI_MAX_INPUT_BYTES", tr_train(), ["VASWANI_MAX_INPUT_BYTES", "'lots'"],
        env={"VASWANI_MAX_INPUT_BYTES": "lots"}),
    Cli("lm", "--text past the input limit", lm_train(text="{tmp}/big.txt"),
        ["big.txt", "more than 20000 bytes", "VASWANI_MAX_INPUT_BYTES"],
        env={"VASWANI_MAX_INPUT_BYTES": "20000"}),
    Cli("lm", "a device as --text (/dev/urandom)", lm_train(text="/dev/urandom"),
        ["/dev/urandom", "a device"]),
    Cli("lm", "a device as --prompt-file", generate("--prompt-file", "/dev/zero"), ["/dev/zero", "a device"]),
    Cli("lm", "d_model 1e9", lm_train("--d-model", "1000000000"),
        ["model.d_model=1000000000", "does not fit in memory"]),
    Cli("lm", "a hand-edited vocabulary of 1e9", ["generate", "{tmp}/huge_vocab", "a"],
        ["huge_vocab/model.safetensors", "model.vocab_size=1000000000", "do not match"]),
    Cli("classify", "a FIFO as --train", cls_train(train="{tmp}/fifo.tsv"), ["fifo.tsv", "FIFO"]),
    Cli("image", "a FIFO to classify-image", ["classify-image", "{img}", "{tmp}/fifo"], ["fifo", "FIFO"]),
    # --word-vectors FILE (train translation, classify, tag)
    Cli("word-vectors", "rows of different lengths", vec_train("vec_ragged.txt"),
        ["vec_ragged.txt:2", "1 values where the first row has 2"]),
    Cli("word-vectors", "a header that counts other rows", vec_train("vec_count.txt"),
        ["vec_count.txt:1", "the header says 3 words, the file has 2 rows"]),
    Cli("word-vectors", "a header of another width", vec_train("vec_width.txt"),
        ["vec_width.txt:2", "2 values where the header says 3"]),
    Cli("word-vectors", "a value that is not a number", vec_train("vec_value.txt"),
        ["vec_value.txt:2", "the value 'zero' is not a number"]),
    Cli("word-vectors", "a word that is not UTF-8", vec_train("vec_latin1.txt"),
        ["vec_latin1.txt:2", "is not UTF-8"]),
    Cli("word-vectors", "a binary word that is not UTF-8", vec_train("vec_latin1.bin"),
        ["vec_latin1.bin: row 2 of the 2", "is not UTF-8"]),
    Cli("word-vectors", "a binary file cut inside a row", vec_train("vec_cut.bin"),
        ["vec_cut.bin: row 2 of the 2", "ends inside its 2 values"]),
    Cli("word-vectors", "a named format the file is not", vec_train("vec_ragged.txt", "--word-vectors-format",
        "word2vec"), ["vec_ragged.txt:1", "starts with a header"]),
    Cli("word-vectors", "no such file", vec_train("nowhere.txt"), ["nowhere.txt", "no such file"]),
    Cli("word-vectors", "a value that is nan", vec_train("vec_nan.txt"),
        ["vec_nan.txt:2", "the value 'nan' is not a finite number"]),
    Cli("word-vectors", "a value that is -inf", vec_train("vec_inf.txt"),
        ["vec_inf.txt:2", "the value '-inf' is not a finite number"]),
    Cli("word-vectors", "a value past float's range (1e999)", vec_train("vec_1e999.txt"),
        ["vec_1e999.txt:2", "the value '1e999' is not a finite number"]),
    Cli("word-vectors", "a NUL byte in a text file", vec_train("vec_nul.txt"),
        ["vec_nul.txt:2", "a NUL byte at column 2"]),
    Cli("word-vectors", "a FIFO without a writer", vec_train("fifo"),
        ["fifo", "FIFO (named pipe) without a writer"]),
    Cli("word-vectors", "without the word-level tokenizer",
        cls_train("--word-vectors", "{tmp}/vec_ragged.txt"), ["data.word_vectors", "--tokenizer word"]),
    Cli("word-vectors", "a word-level source with a shared vocabulary",
        tr_train("--tokenizer", "word", "--shared-vocab"), ["data.shared_vocab", "word-level"]),
    Cli("word-vectors", "a word-level tokenizer with --init",
        ["train", "classify", "--train", "{data}/train.tsv", "--dev", "{data}/dev.tsv", "--init", "{mlm}",
         "--tokenizer", "word", "--out", "{tmp}/out", "--quiet"], ["data.text_tokenizer", "--init"]),
    # an output never overwrites an input, lies in another run, or replaces a file without --force
    Cli("evaluate", "--out the reference", evaluate_out("{data}/train.tgt"),
        ["--out", "train.tgt", "is also an input (--ref"]),
    Cli("evaluate", "--out the source", evaluate_out("{data}/train.src", "--force"),
        ["--out", "train.src", "is also an input (--src"]),
    Cli("evaluate", "--out a hard link to the reference", evaluate_out("{tmp}/hard.tgt", "--force"),
        ["hard.tgt", "is also an input (--ref"]),
    Cli("evaluate", "--out a symbolic link to the source", evaluate_out("{tmp}/link.src", "--force"),
        ["train.src", "is also an input (--src"]),
    Cli("evaluate", "--out a dangling symbolic link", evaluate_out("{tmp}/dangling"),
        ["--out", "dangling", "a symbolic link to nothing"]),
    Cli("evaluate", "--out a loop of symbolic links", evaluate_out("{tmp}/loop"),
        ["--out", "loop", "a symbolic link to nothing"]),
    Cli("evaluate", "--out the run's config.json", evaluate_out("{tr}/config.json", "--force"),
        ["config.json", "is one of the files of the run"]),
    Cli("evaluate", "--out inside another run", evaluate_out("{lm}/hyp.txt"),
        ["lm_run/hyp.txt", "lies inside the run directory", "lm_run"]),
    Cli("evaluate", "--out a file that exists", evaluate_out("{tmp}/p.txt"),
        ["p.txt", "already exists", "--force"]),
    Cli("evaluate", "--out a folder", evaluate_out("{tmp}/folder.tsv", "--force"),
        ["folder.tsv", "is a folder"]),
    Cli("evaluate", "--out in a missing folder", evaluate_out("{tmp}/nowhere/hyp.txt"),
        ["nowhere/hyp.txt", "no such folder"]),
    Cli("evaluate", "--out under a file", evaluate_out("{tmp}/p.txt/hyp.txt"), ["p.txt", "is not a folder"]),
    Cli("evaluate", "--out a file of the --text folder", ["evaluate", "{lm}", "--text", "{tmp}/mixed",
        "--out", "{tmp}/mixed/l.png", "--force"], ["l.png", "is a file of the input folder --text"]),
    Cli("embed", "--out inside a run", ["embed", "{cls}", "a", "--out", "{cls}/e.npy"],
        ["e.npy", "lies inside the run directory"]),
    Cli("plots", "attention --out into a run's checkpoints", ["attention", "{tr}", "a b", "--out",
        "{tr}/checkpoints/a.png"], ["checkpoints/a.png", "is one of the files of the run"]),
    Cli("image", "attention --out its own image", ["attention", "{img}", "{tmp}/big.png", "--out",
        "{tmp}/big.png", "--force"], ["big.png", "is also an input (SENTENCE"]),
    Cli("plots", "plot --out inside another run", ["plot", "{tr}", "--out", "{lm}/curves.png"],
        ["curves.png", "lies inside the run directory"]),
    Cli("plots", "plot --out a file that exists", ["plot", "{tr}", "--out", "{tmp}/big.png"],
        ["big.png", "already exists", "--force"]),
    Cli("average", "--out the run's weights", ["average", "{tr}", "--last", "1", "--out",
        "{tr}/model.safetensors"], ["model.safetensors", "is one of the files of the run"]),
    Cli("average", "--out a checkpoint's weights", ["average", "{tr}", "--last", "1", "--out",
        "{tr}/checkpoints/step_00000002/model.safetensors", "--force"], ["is one of the files of the run"]),
    Cli("average", "--out a file that exists", ["average", "{tr}", "--last", "1", "--out", "{tmp}/p.txt"],
        ["p.txt", "already exists", "--force"]),
    Cli("interop", "export-hf into a folder of a run", ["export-hf", "{lm}", "{lm}/hf"],
        ["lm_run/hf", "lies inside the run directory"]),
    Cli("interop", "export-hf into a missing folder", ["export-hf", "{lm}", "{tmp}/nowhere/hf"],
        ["nowhere/hf", "no such folder"]),
    Cli("interop", "import-hf into a run", ["import-hf", "{tmp}/hf_gpt2", "{mlm}/imported"],
        ["mlm_run/imported", "lies inside the run directory"]),
    Cli("mlm", "a new run inside a run", mlm_train(out="{tr}/inner"),
        ["--out", "inner", "lies inside the run"]),
    # a resume that would train nothing
    Cli("translation", "resume below the run's step", ["train", "translation", "--resume", "{tr}",
        "--max-steps", "1"], ["translation_run", "already at step 2 of max_steps 1", "--max-steps above 2"]),
    Cli("lm", "resume a finished run", ["train", "lm", "--resume", "{lm}"],
        ["lm_run", "already at step 20 of max_steps 20", "nothing to train"]),
    # train tag, vaswani tag
    Cli("tag", "a CoNLL-U line of 8 fields", tag_train(train="{tmp}/tag_cols.conllu"),
        ["tag_cols.conllu:2", "8 tab-separated field(s), CoNLL-U has 10"]),
    Cli("tag", "a sentence without tokens", tag_train(train="{tmp}/tag_empty.conllu"),
        ["tag_empty.conllu:1", "a sentence without tokens"]),
    Cli("tag", "a dev tag that training never saw", tag_train(dev="{tmp}/tag_unseen.conllu"),
        ["tag_unseen.conllu:4", "tag 'INTJ'", "training never saw it"]),
    Cli("tag", "--column past CoNLL-U's ten", tag_train("--column", "12"),
        ["tag_good.conllu", "--column 12", "10 columns"]),
    Cli("tag", "--column past a column file's", tag_train("--column", "3", train="{tmp}/tag_pairs.txt"),
        ["tag_pairs.txt:1", "--column 3", "the line has 2 columns"]),
    Cli("tag", "--column XPOS of a column file", tag_train("--column", "XPOS", train="{tmp}/tag_pairs.txt"),
        ["tag_pairs.txt", "--column XPOS", "column number"]),
    Cli("tag", "--column that names no column", tag_train("--column", "lemmas"),
        ["data.column", "--column", "'lemmas'"]),
    Cli("tag", "a NUL byte in a CoNLL-U word", tag_train(train="{tmp}/tag_nul.conllu"),
        ["tag_nul.conllu:2", "a NUL byte at column 4"]),
    # NUL bytes: no text holds one (issue 34)
    Cli("translation", "a NUL byte in a line of standard input", ["translate", "{tr}"],
        ["<stdin>:2", "a NUL byte at column 2"], stdin=b"a b\nc\0d\n"),
    Cli("classify", "a NUL byte in a text of standard input", ["classify", "{cls}"],
        ["<stdin>:1", "a NUL byte at column 5"], stdin=b"good\0 movie\n"),
    Cli("lm", "a NUL byte in the training text", lm_train(text="{tmp}/nul.txt"), ["nul.txt:2", "a NUL byte"]),
    Cli("classify", "a NUL byte in a TSV file", cls_train(train="{tmp}/nul.tsv"),
        ["nul.tsv:2", "a NUL byte"]),
    # no write through a symbolic link (issue 34): refused in one line naming it, before anything is written
    Cli("lm", "resume a run whose train_log.csv is a link",
        ["train", "lm", "--resume", "{tmp}/linked_train_log.csv", "--max-steps", "30"],
        ["linked_train_log.csv/train_log.csv", "a symbolic link", "no file of a run through a link"]),
    Cli("lm", "resume a run whose checkpoints/ is a link",
        ["train", "lm", "--resume", "{tmp}/linked_checkpoints", "--max-steps", "30"],
        ["linked_checkpoints/checkpoints", "a symbolic link"]),
    Cli("lm", "resume a run folder that is a link",
        ["train", "lm", "--resume", "{tmp}/run_link", "--max-steps", "30"],
        ["run_link", "a symbolic link", "the run directory itself"]),
    Cli("lm", "a new run's --out that is a link to an empty folder",
        tiny_lm_args(Path("{data}/lm.txt"), Path("{tmp}/out_link")),
        ["out_link", "a symbolic link", "itself"]),
    Cli("average", "average a run whose kept weights are a link",
        ["average", "{tmp}/linked_model.before-average.safetensors", "--last", "1"],
        ["/model.before-average.safetensors", "a symbolic link"]),
    Cli("evaluate", "evaluate --out a link", evaluate_out("{tmp}/hyp_link", "--force"),
        ["hyp_link", "a symbolic link"]),
    Cli("tag", "vaswani tag with a classifier run", ["tag", "{cls}", "a b"],
        ["classify_run", "a run of task 'classify'", "tagging needs a run of task tag"]),
]  # fmt: skip


def run_cli(
    paths: Paths,
    argv: list[str],
    stdin: bytes,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """Exit status, standard output and standard error of ``vaswani ARGV`` reading ``stdin``."""
    capsys.readouterr()
    with (
        mock.patch.object(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin))),
        mock.patch.dict(os.environ, env or {}),
    ):
        status = main(paths.fill(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("row", CLI, ids=[f"{row.family}: {row.name}" for row in CLI])
def test_a_bad_command_line_gets_one_line_and_writes_nothing(paths, capsys, row):
    before = paths.snapshot()
    status, out, err = run_cli(paths, row.argv, row.stdin, capsys, row.env)
    assert status == 2, err
    assert err.endswith("\n") and len(err.splitlines()) == 1, err
    assert err.startswith("vaswani: error: ") and "Traceback" not in err
    for word in paths.fill(row.words):
        assert word in err, (word, err)
    assert out == ""
    assert paths.snapshot() == before


# ---------------------------------------------------------------------------------------------
# Python API calls that are refused


@dataclass(frozen=True)
class Loaded:
    """The module's runs loaded through the API, and the test's paths."""

    paths: Paths
    translator: Translator
    lm: LanguageModel
    mlm: MaskedLanguageModel
    classifier: TextClassifier
    encoder: SentenceEncoder


@pytest.fixture(scope="module")
def models(runs: Paths) -> dict[str, Any]:
    """The runs loaded once for the module: :class:`Loaded`'s fields but ``paths``."""
    return {
        "translator": Translator.load(runs.tr),
        "lm": LanguageModel.load(runs.lm),
        "mlm": MaskedLanguageModel.load(runs.mlm),
        "classifier": TextClassifier.load(runs.cls),
        "encoder": SentenceEncoder.load(runs.cls),
    }


@pytest.fixture
def loaded(paths: Paths, models: dict[str, Any]) -> Loaded:
    """The loaded runs, and the test's paths with the bad files."""
    return Loaded(paths, **models)


@dataclass(frozen=True)
class Api:
    """A call refused with exactly ``error``, its message holding ``words``."""

    family: str
    name: str
    call: Callable[[Loaded], object]
    error: type[Exception]
    words: list[str]


def ids(*rows: list[int]) -> torch.Tensor:
    """A (batch, seq) tensor of token ids, one list a row."""
    return torch.tensor(list(rows))


API = [
    Api("translation", "source id above the vocabulary",
        lambda x: x.translator.model(ids([5, 10**6]), ids([1])),
        InputError, ["token id 1000000 at [0, 1]", "outside the vocabulary of 64"]),
    Api("translation", "negative target id", lambda x: x.translator.model(ids([5]), ids([1, -1])),
        InputError, ["token id -1 at [0, 1]", "vocabulary"]),
    Api("translation", "sentence longer than max_len", lambda x: x.translator.translate(["ok", "a " * 600]),
        DataError, ["input line 2", "max_len=512"]),
    Api("translation", "beam search and sampling",
        lambda x: x.translator.translate(["a"], DecodingConfig(beam=2, temperature=1.0)),
        ConfigError, ["beam search and sampling"]),
    Api("translation", "resume a checkpoint of a newer vaswani", lambda x: lifecycle.resume(x.paths.future),
        RunDirError, ["trainer_state.json", "unknown field 'ema_decay'"]),
    Api("translation", "load an lm run", lambda x: Translator.load(x.paths.lm), RunDirError,
        ["'lm'", "'translation'"]),
    Api("lm", "token id equal to the vocabulary size", lambda x: x.lm.model(ids([1, 64])), InputError,
        ["token id 64 at [0, 1]", "vocabulary of 64 (ids 0 to 63)"]),
    Api("lm", "sequence longer than max_len", lambda x: x.lm.model(torch.zeros(1, 33, dtype=torch.long)),
        InputError, ["33 positions", "max_len=32"]),
    Api("lm", "prompt longer than the context", lambda x: x.lm.generate(["a", "the cat " * 5]), DataError,
        ["prompt 2", "context of 32"]),
    Api("lm", "no new tokens", lambda x: x.lm.generate(["a"], DecodingConfig(max_new_tokens=0)), ConfigError,
        ["max_new_tokens", ">= 1"]),
    Api("lm", "loss of an empty text", lambda x: x.lm.loss(""), DataError, ["fewer than two tokens"]),
    Api("lm", "train an int8 model", lambda x: quantize_int8(copy.deepcopy(x.lm.model)).train()(ids([1, 2])),
        ConfigError, ["int8 weights serve inference only"]),
    Api("lm", "speculative sampling", lambda x: x.lm.generate(["a"], DecodingConfig(temperature=0.7),
        draft=x.lm.model), ConfigError, ["--draft decodes greedily"]),
    Api("lm", "speculative batch", lambda x: x.lm.generate(["a", "b"], draft=x.lm.model), ConfigError,
        ["one prompt at a time", "2 rows"]),
    Api("lm", "load a run of a newer format", lambda x: LanguageModel.load(x.paths.newer), RunDirError,
        ["format_version 2", "upgrade"]),
    Api("mlm", "token id above the vocabulary", lambda x: x.mlm.model(ids([2, 500, 3])), InputError,
        ["token id 500 at [0, 1]", "vocabulary of 128"]),
    Api("mlm", "segment id 2", lambda x: x.mlm.model(ids([2, 5, 3]), segments=ids([0, 2, 0])), InputError,
        ["segment id 2 at [0, 1]", "segment embeddings of 2"]),
    Api("fill-mask", "no [MASK]", lambda x: x.mlm.fill_mask("one two"), DataError, ["no [MASK]"]),
    Api("fill-mask", "top_k 0", lambda x: x.mlm.fill_mask("one [MASK]", top_k=0), ValueError, ["top_k"]),
    Api("fill-mask", "load a classify run", lambda x: MaskedLanguageModel.load(x.paths.cls), RunDirError,
        ["'classify'", "mlm"]),
    Api("classify", "load an mlm run", lambda x: TextClassifier.load(x.paths.mlm), RunDirError,
        ["'mlm'", "classify"]),
    Api("classify", "label absent from training",
        lambda x: read_labeled(x.paths.tmp / "maybe.tsv", labels=x.classifier.labels), DataError,
        ["maybe.tsv:3", "'maybe'", "training labels"]),
    Api("embed", "load an lm run", lambda x: SentenceEncoder.load(x.paths.lm), RunDirError,
        ["'lm'", "embed"]),
    Api("translation", "heads do not divide d_model", lambda x: ModelConfig(d_model=30, n_heads=4),
        ConfigError, ["model.n_heads", "divide d_model=30"]),
    Api("lm", "attention window 0", lambda x: ModelConfig(attn_window=0), ConfigError, ["model.attn_window"]),
    Api("mlm", "negative d_ff", lambda x: ModelConfig(d_ff=-1), ConfigError, ["model.d_ff", "> 0"]),
    Api("lm", "zero batch tokens", lambda x: TrainConfig(batch_tokens=0), ConfigError,
        ["train.batch_tokens"]),
    Api("lm", "clipping at infinity", lambda x: TrainConfig(clip_norm=float("inf")), ConfigError,
        ["train.clip_norm", "finite"]),
    Api("lm", "an empty stop string", lambda x: DecodingConfig(stop=("",)), ConfigError,
        ["decoding.stop", "empty"]),
    Api("translation", "parallel files of unequal length",
        lambda x: read_parallel(x.paths.data / "train.src", x.paths.tmp / "short.tgt"), DataError,
        ["short.tgt has 99", "100 lines"]),
    Api("translation", "a directory as a file", lambda x: read_lines(x.paths.tmp), DataError,
        ["is a directory"]),
    Api("translation", "non-UTF-8 file", lambda x: read_lines(x.paths.tmp / "latin1.txt"), DataError,
        ["latin1.txt:2", "byte 0xfc"]),
    Api("translation", "empty file", lambda x: read_lines(x.paths.tmp / "empty.txt"), DataError,
        ["empty.txt", "empty"]),
    Api("interop", "import a missing folder", lambda x: import_hf(x.paths.tmp / "nope", x.paths.tmp / "out"),
        DataError, ["nope", "no such folder"]),
    Api("interop", "export a classify run", lambda x: export_hf(x.paths.cls, x.paths.tmp / "out"),
        RunDirError, ["'classify'", "cannot be exported"]),
    Api("average", "more checkpoints than kept", lambda x: average_checkpoints(x.paths.tr, 5), RunDirError,
        ["cannot average the last 5"]),
    Api("average", "zero checkpoints", lambda x: newest_checkpoints(x.paths.tr, 0), ValueError,
        [">= 1, got 0"]),
    Api("evaluate", "a run config of a newer format", lambda x: RunDir(x.paths.newer).read_config(),
        RunDirError, ["format_version 2", "reads up to 1"]),
    Api("image", "image size not divisible by the patch size",
        lambda x: ModelConfig(arch="vit", image_size=10, patch_size=4), ConfigError,
        ["model.image_size", "divisible by patch_size=4"]),
    Api("image", "load a classify run", lambda x: ImageClassifier.load(x.paths.cls), RunDirError,
        ["'classify'", "image"]),
    Api("image", "a non-image file",
        lambda x: ImageClassifier.load(x.paths.img).predict([x.paths.tmp / "empty.txt"]), DataError,
        ["empty.txt", "not a readable image"]),
    Api("image", "pixels not a multiple of the patch size",
        lambda x: ImageClassifier.load(x.paths.img).model(torch.zeros(1, 1, 8, 7)), InputError,
        ["multiples of patch_size=2", "(1, 1, 8, 7)"]),
]  # fmt: skip


@pytest.mark.parametrize("row", API, ids=[f"{row.family}: {row.name}" for row in API])
def test_a_bad_api_call_raises_its_error_and_writes_nothing(loaded, row):
    before = loaded.paths.snapshot()
    with pytest.raises(row.error) as caught:
        row.call(loaded)
    assert type(caught.value) is row.error, repr(caught.value)  # exactly, not a subclass
    message = str(caught.value)
    assert "\n" not in message
    for word in row.words:
        assert word in message, (word, message)
    assert loaded.paths.snapshot() == before


# ---------------------------------------------------------------------------------------------
# Inputs with a documented behaviour other than an error


def cli_ok(loaded: Loaded, argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """Standard output and standard error of ``vaswani ARGV``, which must succeed."""
    status, out, err = run_cli(loaded.paths, argv, b"", capsys)
    assert status == 0, err
    return out, err


def stop_string_never_found(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    """Generation runs to --max-new-tokens, as without the stop string."""
    argv = ["generate", "{lm}", "the", "--max-new-tokens", "12", "--temperature", "0"]
    plain, _ = cli_ok(x, argv, capsys)
    stopped, err = cli_ok(x, [*argv, "--stop", "QQ"], capsys)
    assert stopped == plain and err == ""
    assert len(x.lm.tokenizer.encode(stopped.removeprefix("the").removesuffix("\n"))) == 12


def no_prompts(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    assert x.lm.generate([]) == []


def no_sentences(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    assert x.translator.translate([]) == [] and x.translator.translate([], DecodingConfig(beam=2)) == []
    assert x.translator.translate_n_best([], DecodingConfig(beam=4, n_best=2)) == []


def no_texts(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    assert x.classifier.predict([]) == []
    assert x.classifier.probabilities([]).shape == (0, 2)


def no_texts_to_embed(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    assert x.encoder.embed([]).shape == (0, 32)


def zero_size_tensors(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    """No rows, or rows of no tokens: the empty result of that shape."""
    empty = torch.zeros(0, 4, dtype=torch.long)
    with torch.no_grad():
        assert x.lm.model(empty).shape == (0, 4, 64)
        assert x.lm.model(torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0, 64)
        assert x.translator.model(empty, torch.zeros(0, 3, dtype=torch.long)).shape == (0, 3, 64)
        assert x.translator.model(ids([5, 6]), torch.zeros(1, 0, dtype=torch.long)).shape == (1, 0, 64)
        assert x.mlm.model(empty).shape == (0, 4, 128)


def cut_with_a_warning(command: str) -> Callable[[Loaded, pytest.CaptureFixture[str]], None]:
    """``classify`` or ``embed`` of a text longer than the model's max_len (24): the model reads it
    cut to max_len, and one warning line says so."""

    def check(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
        out, err = cli_ok(x, [command, "{cls}", "a good film", "good " * 30], capsys)
        assert err.splitlines() == [
            "vaswani: warning: 1 of 2 texts are longer than the model's max_len of 24 tokens and were cut "
            "to it (the first: text 2, 32 tokens)"
        ]
        if command == "classify":
            assert len(out.splitlines()) == 2
        else:
            assert "cosine similarity" in out

    return check


def bom_stripped(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    """A UTF-8 byte-order mark at the start of a file or of standard input is not text: dropped."""
    assert read_lines(x.paths.tmp / "bom.txt") == ["a b"]
    plain = run_cli(x.paths, ["translate", "{tr}", "a b"], b"", capsys)
    assert run_cli(x.paths, ["translate", "{tr}"], "\ufeffa b\n".encode(), capsys) == plain
    assert plain[0] == 0


def empty_prompt(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    """``generate RUN ""`` is unconditional generation from the start, as no prompt at all is."""
    argv = ["generate", "{lm}", "--max-new-tokens", "5", "--temperature", "0"]
    assert cli_ok(x, [*argv, ""], capsys) == cli_ok(x, argv, capsys)


COMPILE_FALLBACK = "vaswani: --compile: torch.compile does not work here ("


def compile_unavailable(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    """``generate --compile`` where a cheap check shows that compilation cannot work: one line
    saying why, and the eager output; where it works (dynamo's "eager" backend here), the same
    output and one line with the compile time."""
    argv = ["generate", "{lm}", "the", "--max-new-tokens", "8", "--temperature", "0"]
    plain, _ = cli_ok(x, argv, capsys)
    with mock.patch.object(compiled_decoding, "compile_unsupported", lambda device, backend: "no compiler"):
        out, err = cli_ok(x, [*argv, "--compile"], capsys)
    assert out == plain and err.splitlines() == [COMPILE_FALLBACK + "no compiler); decoding without it"]
    with mock.patch.object(compiled_decoding, "BACKEND", "eager"):
        out, err = cli_ok(x, [*argv, "--compile"], capsys)
    assert out == plain and len(err.splitlines()) == 1
    assert err.startswith("vaswani: --compile: 1 decoding graph compiled in ")


def compile_fails(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    """``translate --compile`` where compilation fails at the first compiled step: one line saying
    why, and the eager translations."""

    def failing(gm: Any, example_inputs: Any) -> Any:
        raise RuntimeError("no kernels today")

    argv = ["translate", "{tr}", "a b c", "b a", "--max-new-tokens", "6"]
    plain, _ = cli_ok(x, argv, capsys)
    with mock.patch.object(compiled_decoding, "BACKEND", failing):
        out, err = cli_ok(x, [*argv, "--compile"], capsys)
    assert out == plain
    notes = ("vaswani: weights: ", UNDERTRAINED)  # which file; the tiny run's empty translation
    lines = [line for line in err.splitlines() if not line.startswith(notes)]
    assert lines == [COMPILE_FALLBACK + "RuntimeError: no kernels today); decoding without it"]


def serve_compile_unavailable(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    """``serve --compile`` where a cheap check shows that compilation cannot work: one line at
    start-up, and completions and translations answered eagerly, as without ``--compile``."""
    settings = ServeSettings(device="cpu", compile=True)
    with mock.patch.object(compiled_decoding, "compile_unsupported", lambda device, backend: "no compiler"):
        app = create_app([x.paths.lm, x.paths.tr], settings)
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("vaswani:")]
    assert said == [COMPILE_FALLBACK + "no compiler); decoding without it"] * 2  # one a run
    name = {served.task: name for name, served in app.state.models.items()}
    with serving(app) as client:
        body = {"model": name["lm"], "prompt": "the", "max_tokens": 8}
        completion = client.post("/v1/completions", json=body).json()
        body = {"model": name["translation"], "input": ["a b c"]}
        translation = client.post("/v1/translations", json=body).json()
    assert completion["choices"][0]["text"] == x.lm.generate(["the"], DecodingConfig(max_new_tokens=8))[0]
    assert translation["data"][0]["text"] == x.translator.translate(["a b c"])[0]


def mixed_image_modes(x: Loaded, capsys: pytest.CaptureFixture[str]) -> None:
    """One picture as L, RGB, RGBA, 16-bit, palette and a 3x larger JPEG: each read as the run's one grey
    channel and resized (:mod:`vaswani.data.images`), so that all but the resized JPEG get the exact
    probabilities of the L file; one line each."""
    files = sorted((x.paths.tmp / "mixed").iterdir())
    out, err = cli_ok(x, ["classify-image", "{img}", *map(str, files), "--top-k", "10"], capsys)
    rows = {Path(line.split("\t")[0]).name: line.split("\t")[1:] for line in out.splitlines()}
    assert sorted(rows) == sorted(p.name for p in files) and err == ""
    assert all(rows[name] == rows["l.png"] for name in ("rgb.png", "rgba.png", "wide.png", "palette.png"))
    probabilities = ImageClassifier.load(x.paths.img, "cpu").probabilities(
        [x.paths.tmp / "mixed" / "big.jpg"]
    )
    assert probabilities.shape == (1, 10) and float(probabilities.sum()) == pytest.approx(1.0)


@dataclass(frozen=True)
class Documented:
    """An input that looks wrong and has a documented behaviour, which ``check`` asserts."""

    family: str
    name: str
    check: Callable[[Loaded, pytest.CaptureFixture[str]], None]


DOCUMENTED = [
    Documented("lm", "a stop string never found: runs to --max-new-tokens", stop_string_never_found),
    Documented("lm", "no prompts: no continuations", no_prompts),
    Documented("translation", "no sentences: no translations", no_sentences),
    Documented("classify", "no texts: no labels", no_texts),
    Documented("embed", "no texts: a (0, d_model) tensor", no_texts_to_embed),
    Documented("lm", "zero-size token tensors: empty outputs", zero_size_tensors),
    Documented("classify", "a text longer than max_len: cut, with a warning", cut_with_a_warning("classify")),
    Documented("embed", "a text longer than max_len: cut, with a warning", cut_with_a_warning("embed")),
    Documented("image", "images of mixed modes and sizes: converted as documented", mixed_image_modes),
    Documented("translation", "a byte-order mark: dropped", bom_stripped),
    Documented("lm", "an empty prompt: generation from the start", empty_prompt),
    Documented("lm", "--compile where compilation cannot work: one line, eager output", compile_unavailable),
    Documented("translation", "--compile where compilation fails: one line, eager output", compile_fails),
    Documented(
        "serve", "--compile where compilation cannot work: one line, eager answers", serve_compile_unavailable
    ),
]


@pytest.mark.parametrize("row", DOCUMENTED, ids=[f"{row.family}: {row.name}" for row in DOCUMENTED])
def test_an_input_with_a_documented_behaviour_gets_it_and_writes_nothing(loaded, capsys, row):
    before = loaded.paths.snapshot()
    row.check(loaded, capsys)
    assert loaded.paths.snapshot() == before


# ---------------------------------------------------------------------------------------------
# The catalogue itself, and --debug


def test_the_catalogue_covers_every_family():
    families = {row.family for row in CLI}
    assert families == set(FAMILIES)
    assert len(CLI) + len(API) + len(DOCUMENTED) >= 30
    for table in (CLI, API, DOCUMENTED):
        names = [(row.family, row.name) for row in table]
        assert len(names) == len(set(names))  # one row per bad input (the same one may be in CLI and API)


@pytest.mark.slow
def test_debug_shows_the_traceback(tmp_path):
    """The command in its own process: one line and status 2, and with --debug the traceback."""
    argv = [sys.executable, "-m", "vaswani.cli", "translate", str(tmp_path), "hello"]
    plain = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert plain.returncode == 2
    assert plain.stderr.splitlines() == [
        f"vaswani: error: {tmp_path}: not a vaswani run directory (no config.json)"
    ]
    debug = subprocess.run([*argv[:3], "--debug", *argv[3:]], capture_output=True, text=True, check=False)
    assert debug.returncode != 0
    assert "Traceback (most recent call last)" in debug.stderr and debug.stderr.rstrip().endswith(
        f"RunDirError: {tmp_path}: not a vaswani run directory (no config.json)"
    )
    assert list(tmp_path.iterdir()) == []
