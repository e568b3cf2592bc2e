"""Hugging Face datasets as input (:mod:`vaswani.data.hf_datasets`): every task that reads text gets
from a ``save_to_disk`` folder and from Parquet, JSON Lines and CSV files exactly the examples its
file reader gets from the same data in vaswani's formats; a run trains on a dataset folder and
records it for ``--resume``; a streamed dataset gives a language model the same batches as one read
into memory, and resumes exactly; every bad dataset is one line."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import log_rows, tiny_classify_args, tiny_lm_args, write, write_lm_text, write_sentiment
from vaswani.cli import main
from vaswani.data.config import LabeledData, ParallelData, TagData, TextData
from vaswani.data.labeled import read_labeled
from vaswani.io import WEIGHTS
from vaswani.pipelines.lm_text import STREAM_FILE, split_text
from vaswani.tasks.classify import load_labeled
from vaswani.tasks.lm import LMTask
from vaswani.tasks.tag import read_sentences
from vaswani.tasks.translation import load_data

datasets = pytest.importorskip("datasets")
datasets.disable_progress_bars()

FORMATS = ("saved", "parquet", "jsonl", "csv")
DOCUMENTS = ["the cat sat on the mat", "a dog ran\nto the red hat", "birds sang, while the cat slept"] * 4


def write_dataset(
    folder: Path, splits: dict[str, dict[str, list[Any]]], fmt: str, features: Any = None
) -> Path:
    """``splits`` ({split: {column: values}}) as a ``save_to_disk`` folder, or a folder of
    ``SPLIT.parquet``/``.jsonl``/``.csv`` files; its path."""
    built = datasets.DatasetDict(
        {name: datasets.Dataset.from_dict(columns, features=features) for name, columns in splits.items()}
    )
    path = folder / f"dataset_{fmt}"
    if fmt == "saved":
        built.save_to_disk(str(path))
        return path
    path.mkdir()
    for name, split in built.items():
        out = str(path / f"{name}.{fmt}")
        {
            "parquet": split.to_parquet,
            "jsonl": lambda o, s=split: s.to_json(o, lines=True),
            "csv": split.to_csv,
        }[fmt](out)
    return path


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test's datasets cache in its own folder (``load_dataset`` writes Arrow files there)."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))


# ---------------------------------------------------------------------------------------------
# The same examples as the file readers


@pytest.mark.parametrize("fmt", FORMATS)
def test_lm_and_mlm_documents_are_those_of_one_file_a_document(fmt, tmp_path):
    files = [write(tmp_path / f"doc{i:02d}.txt", d) for i, d in enumerate(DOCUMENTS)]
    path = write_dataset(tmp_path, {"train": {"text": DOCUMENTS}}, fmt)
    reference = split_text(TextData(source="text", text=tuple(map(str, files)), valid_fraction=0.2))
    found = split_text(TextData(source="dataset", dataset=str(path), valid_fraction=0.2))
    assert found[:2] == reference[:2]
    assert found[2] == f"{path}[train]"


def test_a_validation_split_is_scored_on_and_dev_split_names_another(tmp_path):
    path = write_dataset(
        tmp_path,
        {"train": {"text": DOCUMENTS}, "validation": {"text": ["v"]}, "test": {"text": ["t"]}},
        "saved",
    )
    assert split_text(TextData(source="dataset", dataset=str(path)))[:2] == (DOCUMENTS, ["v"])
    assert split_text(TextData(source="dataset", dataset=str(path), dev_split="test"))[1] == ["t"]


SENTIMENT_FEATURES = {"text": "string", "label": ["negative", "positive"]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_classify_examples_are_those_of_the_labeled_files(fmt, tmp_path):
    train, dev = (
        write_sentiment(tmp_path, "train", 30, 0, "jsonl"),
        write_sentiment(tmp_path, "dev", 10, 1, "jsonl"),
    )
    rows = {
        name: [json.loads(line) for line in f.read_text().splitlines()]
        for name, f in (("train", train), ("validation", dev))
    }
    names = ["negative", "positive"]
    features = None
    if fmt == "saved":  # ClassLabel ids, read as their names
        features = datasets.Features(
            {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=names)}
        )
        columns = {
            k: {"text": [r["text"] for r in v], "label": [names.index(r["label"]) for r in v]}
            for k, v in rows.items()
        }
    else:
        columns = {
            k: {"text": [r["text"] for r in v], "label": [r["label"] for r in v]} for k, v in rows.items()
        }
    path = write_dataset(tmp_path, columns, fmt, features)
    reference = load_labeled(LabeledData(train_file=str(train), dev_file=str(dev)))
    found = load_labeled(LabeledData(dataset=str(path)))
    assert found.labels == reference.labels
    for ours, theirs in ((found.train, reference.train), (found.dev, reference.dev)):
        assert [(e.texts, e.label) for e in ours.examples] == [(e.texts, e.label) for e in theirs.examples]


def test_classify_sentence_pairs_are_its_two_string_columns(tmp_path):
    columns = {
        "premise": ["a b", "c d", "e f"],
        "hypothesis": ["x", "y", "z"],
        "label": [0, 1, 0],
        "idx": [0, 1, 2],
    }
    path = write_dataset(tmp_path, {"train": columns, "validation": columns}, "parquet")
    tsv = write(
        tmp_path / "pairs.tsv",
        "".join(f"{a}\t{b}\t{y}\n" for a, b, y in zip(*list(columns.values())[:3], strict=True)),
    )
    found = load_labeled(LabeledData(dataset=str(path)))
    reference = read_labeled(tsv)
    assert found.train.text_columns == ("premise", "hypothesis")
    assert [(e.texts, e.label) for e in found.train.examples] == [
        (e.texts, e.label) for e in reference.examples
    ]


CONLL = "EU B-ORG\nrejects O\nGerman B-MISC\n\nPeter B-PER\nBlackburn I-PER\n\n"


def test_tag_sentences_are_those_of_the_column_file_class_labels_read_as_names(tmp_path):
    names = ["O", "B-ORG", "B-MISC", "B-PER", "I-PER"]
    rows = {
        "tokens": [["-DOCSTART-"], ["EU", "rejects", "German"], ["Peter", "Blackburn"]],
        "ner_tags": [[0], [1, 0, 2], [3, 4]],
    }
    features = datasets.Features(
        {
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names)),
        }
    )
    path = write_dataset(tmp_path, {"train": rows, "validation": rows}, "saved", features)
    conll = write(tmp_path / "train.txt", "-DOCSTART- O\n\n" + CONLL)
    train, dev, name = read_sentences(TagData(dataset=str(path)))
    reference, _, _ = read_sentences(TagData(train_file=str(conll), dev_file=str(conll)))
    assert [(s.words, s.tags) for s in train] == [(s.words, s.tags) for s in reference]
    assert [(s.words, s.tags) for s in dev] == [(s.words, s.tags) for s in reference]
    assert name == f"{path}[train]"


@pytest.mark.parametrize("fmt", FORMATS)
def test_translation_pairs_are_those_of_the_parallel_files(fmt, tmp_path):
    pairs = [(f"quelle {i}", f"source {i}") for i in range(40)]
    src = write(tmp_path / "train.de", "".join(s + "\n" for s, _ in pairs))
    tgt = write(tmp_path / "train.en", "".join(t + "\n" for _, t in pairs))
    reference = load_data(ParallelData(src=str(src), tgt=str(tgt)))
    path = write_dataset(tmp_path, {"train": {"de": [s for s, _ in pairs], "en": [t for _, t in pairs]}}, fmt)
    found = load_data(
        ParallelData(source="dataset", dataset=str(path), source_column="de", target_column="en")
    )
    assert (found.train, found.valid, found.test) == (reference.train, reference.valid, reference.test)


def test_translation_reads_the_translation_column_by_its_languages(tmp_path):
    rows = [{"de": f"hallo {i}", "en": f"hello {i}"} for i in range(5)]
    path = write_dataset(
        tmp_path,
        {
            "train": {"translation": rows},
            "validation": {"translation": rows[:2]},
            "test": {"translation": rows[2:]},
        },
        "jsonl",
    )
    data = load_data(ParallelData(source="dataset", dataset=str(path), source_lang="en", target_lang="de"))
    assert data.train == [(r["en"], r["de"]) for r in rows]
    assert data.valid == data.train[:2] and data.test == data.train[2:]


# ---------------------------------------------------------------------------------------------
# Training on a dataset


def _lm_args(out: Path, path: Path, *extra: str) -> list[str]:
    """:func:`tiny_lm_args` for 8 steps on the dataset ``path`` (a checkpoint and an evaluation each 4)."""
    args = tiny_lm_args(
        Path("unused"), out, "--max-steps", "8", "--checkpoint-every", "4", "--eval-every", "4"
    )
    args[args.index("--text") : args.index("--text") + 2] = ["--dataset", str(path)]
    return [*args, *extra]


def lm_dataset(folder: Path) -> Path:
    """The tiny language model's text as a saved dataset, one line a row, its last 40 the validation."""
    text = write_lm_text(folder / "text.txt").read_text().splitlines()
    return write_dataset(folder, {"train": {"text": text[:260]}, "validation": {"text": text[260:]}}, "saved")


def test_lm_trains_on_a_dataset_folder_and_resumes_reading_it_again(tmp_path):
    path = lm_dataset(tmp_path)
    out = tmp_path / "run"
    assert main(_lm_args(out, path, "--max-steps", "6")) == 0
    data = json.loads((out / "config.json").read_text())["data"]
    assert (data["source"], data["dataset"], data["split"], data["text_column"]) == (
        "dataset",
        str(path),
        "train",
        "text",
    )
    assert main(["train", "lm", "--resume", str(out), "--max-steps", "8", "--quiet"]) == 0
    assert json.loads((out / "metrics.json").read_text())["steps"] == 8


def _lm(out: Path, path: Path, *extra: str) -> list[dict[str, str]]:
    """The log of the tiny language model trained 8 steps on the dataset ``path`` into ``out``."""
    assert main(_lm_args(out, path, *extra)) == 0
    return log_rows(out)


def test_streaming_gives_the_same_batches_and_resumes_exactly(tmp_path, monkeypatch):
    path = lm_dataset(tmp_path)
    in_memory = _lm(tmp_path / "memory", path)
    streamed = _lm(tmp_path / "streamed", path, "--streaming")
    assert (tmp_path / "streamed" / STREAM_FILE).is_file()
    numbers = ("step", "kind", "train_loss", "grad_norm", "valid_loss")
    assert [[r[k] for k in numbers] for r in streamed] == [[r[k] for k in numbers] for r in in_memory]
    # Interrupted (SIGINT) during step 5, then resumed from its token file: the uninterrupted weights.
    calls, original = 0, LMTask.loss

    def interrupted_loss(self: LMTask, model: Any, batch: torch.Tensor) -> Any:
        nonlocal calls
        calls += 1
        if calls == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, model, batch)

    monkeypatch.setattr(LMTask, "loss", interrupted_loss)
    parts = tmp_path / "parts"
    assert main(_lm_args(parts, path, "--streaming")) == 130  # stopped, with a checkpoint
    monkeypatch.undo()
    assert main(["train", "lm", "--resume", str(parts), "--quiet"]) == 0
    ours, theirs = load_file(str(parts / WEIGHTS)), load_file(str(tmp_path / "streamed" / WEIGHTS))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_classify_trains_on_a_dataset_of_jsonl_files(tmp_path, capsys):
    folder = tmp_path / "data"
    folder.mkdir()
    write_sentiment(folder, "train", 60, 0, "jsonl")
    write_sentiment(folder, "validation", 20, 1, "jsonl")
    args = tiny_classify_args(Path("unused"), Path("unused"), tmp_path / "run", "--epochs", "1")
    for name in ("--train", "--dev"):
        del args[args.index(name) : args.index(name) + 2]
    assert main([*args, "--dataset", str(folder)]) == 0
    assert json.loads((tmp_path / "run" / "config.json").read_text())["data"]["labels"] == [
        "negative",
        "positive",
    ]


# ---------------------------------------------------------------------------------------------
# Bad datasets: one line each


def _refused(capsys, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def text_dataset(tmp_path) -> Path:
    return write_dataset(tmp_path, {"train": {"text": DOCUMENTS, "n": list(range(12))}}, "saved")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--text-column", "body"], ["no column 'body'", "the columns are text, n"]),
        (["--split", "dev"], ["no split 'dev'", "the dataset has train"]),
        (["--text-column", "n"], ["row 0", "column 'n' must be a string"]),
    ],
)
def test_a_missing_column_or_split_or_a_wrong_value_is_one_line(extra, words, text_dataset, tmp_path, capsys):
    err = _refused(
        capsys, ["train", "lm", "--dataset", str(text_dataset), "--out", str(tmp_path / "r"), *extra]
    )
    assert all(w in err for w in words), err
    assert not (tmp_path / "r").exists()


def test_a_none_value_and_an_empty_split_are_one_line(tmp_path, capsys):
    path = write_dataset(tmp_path, {"train": {"text": ["a", None]}}, "jsonl")
    err = _refused(capsys, ["train", "lm", "--dataset", str(path), "--out", str(tmp_path / "r")])
    assert "row 1" in err and "'text'" in err and "None" in err
    path = write_dataset(tmp_path, {"train": {"text": []}}, "csv")  # datasets itself refuses it
    assert 'cannot read the dataset (Instruction "train" corresponds to no data!)' in _refused(
        capsys, ["train", "lm", "--dataset", str(path), "--out", str(tmp_path / "r")]
    )


def test_a_classifier_without_a_validation_split_is_told_to_name_one(text_dataset, tmp_path, capsys):
    err = _refused(
        capsys, ["train", "classify", "--dataset", str(text_dataset), "--out", str(tmp_path / "r")]
    )
    assert "--dev-split" in err and "train" in err


def test_streaming_without_a_split_to_score_on_is_one_line(text_dataset, tmp_path, capsys):
    err = _refused(
        capsys, ["train", "lm", "--dataset", str(text_dataset), "--streaming", "--out", str(tmp_path / "r")]
    )
    assert "--dev-split" in err


def test_without_the_datasets_package_the_error_says_how_to_install_it(
    text_dataset, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets raises ImportError
    err = _refused(capsys, ["train", "lm", "--dataset", str(text_dataset), "--out", str(tmp_path / "r")])
    assert "pip install 'vaswani[datasets]'" in err


def test_a_dataset_and_files_together_are_refused(text_dataset, tmp_path, capsys):
    err = _refused(
        capsys,
        [
            "train",
            "lm",
            "--dataset",
            str(text_dataset),
            "--text",
            str(text_dataset),
            "--out",
            str(tmp_path / "r"),
        ],
    )
    assert "--dataset" in err


def test_nothing_is_downloaded(monkeypatch, text_dataset):
    """The reader reads local paths only: offline, a name that is no path is refused, not fetched."""
    from vaswani.data.hf_datasets import open_splits
    from vaswani.errors import DataError

    with pytest.raises(DataError, match="no such dataset"):
        open_splits("imdb")
    assert open_splits(text_dataset)["train"].num_rows == 12
    import os

    assert os.environ["HF_DATASETS_OFFLINE"] == "1" and os.environ["HF_HUB_OFFLINE"] == "1"
