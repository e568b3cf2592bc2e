"""Hugging Face datasets as input: a ``save_to_disk`` folder, or local Parquet, JSON Lines, JSON or
CSV files, read offline into the structures vaswani's own file readers make.

``--dataset PATH`` names a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``
(read with ``datasets.load_from_disk``), a folder of data files (``datasets.load_dataset`` tells the
splits apart by the files' names: ``train.parquet``, ``validation.jsonl``...), or one data file
(``.parquet``, ``.jsonl``, ``.json``, ``.csv``: the split ``train``). A saved single ``Dataset`` is
the split ``train`` too. Nothing is downloaded: ``HF_DATASETS_OFFLINE`` and ``HF_HUB_OFFLINE`` are
set before :mod:`datasets` is imported, and only local paths are accepted.

Each task reads rows into what its file reader returns, so that the task after reading is unchanged:
documents (``lm``, ``mlm``: :func:`documents`), labeled examples (``classify``:
:func:`labeled_examples`), tagged sentences (``tag``: :func:`tagged_sentences`) and sentence pairs
(``translation``, ``nat``: :func:`sentence_pairs`). An integer column with ``ClassLabel`` names (a
label, or a sequence of tags) reads as the names. A missing split, a missing column, a value of
the wrong type (naming its row, counted from 0, and its column) and an empty split are one-line
:class:`~vaswani.errors.DataError`\\ s.

:mod:`datasets` is optional (``pip install 'vaswani[datasets]'``) and imported only here, when a
dataset is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from vaswani.data.conll import DOCSTART, Sentence
from vaswani.data.labeled import Example, LabeledFile
from vaswani.errors import ConfigError, DataError

BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
"""The ``datasets.load_dataset`` builder of a data file, by its extension."""
TAG_COLUMNS = ("tags", "ner_tags", "upos", "pos_tags")
"""The tags' column of a tagging dataset when none is named: the first of these it has."""
TRANSLATION = "translation"
"""The column of Hugging Face's translation layout: ``{"translation": {"de": ..., "en": ...}}``."""
BATCH = 1024  # rows read at a time


def _datasets() -> Any:
    """The :mod:`datasets` package, imported offline, or a one-line error saying how to install it."""
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            "--dataset needs the Hugging Face datasets package: pip install 'vaswani[datasets]'"
        ) from None
    datasets.disable_progress_bars()
    return datasets


def _is_saved(folder: Path) -> bool:
    """Whether ``folder`` was written by ``save_to_disk`` (a Dataset's or a DatasetDict's)."""
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def open_splits(path: str | Path, streaming: bool = False) -> dict[str, Any]:
    """The splits of the dataset at ``path`` (see the module docstring), by name: each a
    ``datasets.Dataset``, or with ``streaming`` an ``IterableDataset`` that reads rows as they are
    asked for (a saved folder's Arrow files are memory-mapped; data files are read a batch at a
    time)."""
    datasets = _datasets()
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such dataset folder or file")
    try:
        if path.is_dir() and _is_saved(path):
            loaded = datasets.load_from_disk(str(path))
            splits = dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
            return {k: v.to_iterable_dataset() for k, v in splits.items()} if streaming else splits
        if path.is_dir():
            return dict(datasets.load_dataset(str(path), streaming=streaming))
        builder = BUILDERS.get(path.suffix.lower())
        if builder is None:
            raise DataError(
                f"{path}: not a dataset: a save_to_disk folder, a folder of data files, or a "
                f"{', '.join(BUILDERS)} file"
            )
        return dict(datasets.load_dataset(builder, data_files={"train": str(path)}, streaming=streaming))
    except (DataError, ConfigError):
        raise
    except Exception as exc:  # datasets' own errors: a bad file, an unknown layout
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DataError(f"{path}: cannot read the dataset ({first})") from None


def split_of(splits: dict[str, Any], split: str, path: str | Path) -> Any:
    """The split ``split`` of ``splits`` (the dataset at ``path``), or an error listing the splits."""
    if split not in splits:
        raise DataError(f"{path}: no split '{split}' (the dataset has {', '.join(sorted(splits))})")
    return splits[split]


def dev_split_name(splits: dict[str, Any], given: str | None, path: str | Path) -> str | None:
    """The split to score on: ``given`` (which must exist), else ``validation`` where the dataset
    has one, else None (the task holds out its own)."""
    if given is not None:
        split_of(splits, given, path)
        return given
    return "validation" if "validation" in splits else None


def scored_split(splits: dict[str, Any], given: str | None, path: str | Path) -> str:
    """The split a task that holds out nothing of its own scores on (:func:`dev_split_name`)."""
    dev = dev_split_name(splits, given, path)
    if dev is None:
        raise DataError(
            f"{path}: no validation split to score on: name one with --dev-split "
            f"(the dataset has {', '.join(sorted(splits))})"
        )
    return dev


def train_and_dev(
    path: str | Path, split: str, dev_split: str | None
) -> tuple[tuple[Any, str], tuple[Any, str]]:
    """The training split and the split scored on (:func:`scored_split`) of the dataset at ``path``,
    each with its name (:func:`split_name`)."""
    splits = open_splits(path)
    dev = scored_split(splits, dev_split, path)
    return (split_of(splits, split, path), split_name(path, split)), (splits[dev], split_name(path, dev))


def _columns(dataset: Any) -> list[str]:
    """A split's column names (a streamed split whose files do not say: those of its first row)."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    return list(next(iter(dataset), {}))


def _check_columns(dataset: Any, wanted: Sequence[str], name: str) -> None:
    present = _columns(dataset)
    for column in wanted:
        if column not in present:
            raise DataError(f"{name}: no column '{column}' (the columns are {', '.join(present)})")


def rows(dataset: Any, columns: Sequence[str], name: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, {column: value}) of every row of a split, counted from 0, read ``BATCH`` rows at a
    time; a missing column is refused first, and a split without rows once it is read."""
    _check_columns(dataset, columns, name)
    index = 0
    for batch in dataset.select_columns(list(columns)).iter(batch_size=BATCH):
        for i in range(len(batch[columns[0]])):
            yield index, {c: batch[c][i] for c in columns}
            index += 1
    if index == 0:
        raise DataError(f"{name}: the split has no rows")


def _names(dataset: Any, column: str) -> list[str] | None:
    """The ``ClassLabel`` names of a column (or of its sequence's items), or None."""
    features = getattr(dataset, "features", None)
    feature = features.get(column) if features is not None else None
    feature = getattr(feature, "feature", feature)  # a sequence of class labels
    return getattr(feature, "names", None)


def _string(value: Any, index: int, column: str, name: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{name}: row {index}: column '{column}' must be a string, got {value!r}")
    return value


def _label(value: Any, names: list[str] | None, index: int, column: str, name: str) -> str:
    """A label as the file readers write it: a ``ClassLabel`` id's name, a string stripped, an
    integer or boolean as JSON writes it."""
    if (
        names is not None
        and isinstance(value, int)
        and not isinstance(value, bool)
        and 0 <= value < len(names)
    ):
        return names[value]
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, (bool, int)):
        return json.dumps(value)
    raise DataError(
        f"{name}: row {index}: column '{column}' must be a string, an integer or a boolean, got {value!r}"
    )


def documents(dataset: Any, column: str, name: str) -> Iterator[str]:
    """The documents of a split, one a row of ``column``; empty rows are skipped (a corpus of one
    line a row, such as WikiText, has blank ones)."""
    for index, row in rows(dataset, [column], name):
        text = _string(row[column], index, column, name)
        if text.strip():
            yield text


def labeled_examples(
    dataset: Any,
    name: str,
    text_columns: Sequence[str] | None,
    label_column: str | None,
    labels: Sequence[str] | None = None,
) -> LabeledFile:
    """The examples of a split for a classifier, as :func:`vaswani.data.labeled.read_labeled` reads
    a file: the label from ``label_column`` (default ``label``), the text from ``text_columns`` (one,
    or two for sentence pairs; default: the string columns besides the label, when there are one or
    two). ``labels``: the known labels (the training split's, when reading the dev split); a row
    with another label is refused. ``Example.line`` is the row's index."""
    label_column = label_column or "label"
    if text_columns:
        texts = list(text_columns)
    else:
        features = dataset.features or {}
        texts = [
            c
            for c in _columns(dataset)
            if c != label_column and getattr(features.get(c), "dtype", None) in ("string", "large_string")
        ]
        if len(texts) not in (1, 2):
            raise DataError(
                f"{name}: {len(texts)} text columns besides '{label_column}' ({', '.join(texts) or 'none'}); "
                "name the text column(s) with --text-column"
            )
    names = _names(dataset, label_column)
    examples = []
    for index, row in rows(dataset, [*texts, label_column], name):
        found = tuple(_string(row[c], index, c, name).strip() for c in texts)
        for text, column in zip(found, texts, strict=True):
            if not text:
                raise DataError(f"{name}: row {index}: empty text in column '{column}'")
        label = _label(row[label_column], names, index, label_column, name)
        if not label:
            raise DataError(f"{name}: row {index}: empty label in column '{label_column}'")
        if labels is not None and label not in labels:
            raise DataError(
                f"{name}: row {index}: label {label!r} is not one of the training labels "
                f"({', '.join(labels)})"
            )
        examples.append(Example(found, label, index))
    return LabeledFile(Path(name), examples, tuple(texts), label_column, True)


def tagged_sentences(dataset: Any, name: str, tokens_column: str, tags_column: str | None) -> list[Sentence]:
    """The sentences of a split for a tagger, as :func:`vaswani.data.conll.read_tagged` reads a file:
    the words from ``tokens_column``, their tags from ``tags_column`` (default: the first of
    :data:`TAG_COLUMNS` present; ``ClassLabel`` ids read as their names). Rows without words and
    ``-DOCSTART-`` rows (CoNLL-2003's documents' starts) are skipped; ``Sentence.lines`` holds the
    row's index for each word."""
    if tags_column is None:
        present = _columns(dataset)
        tags_column = next((c for c in TAG_COLUMNS if c in present), None)
        if tags_column is None:
            raise DataError(
                f"{name}: no tags column ({', '.join(TAG_COLUMNS)}); name it with --tags-column "
                f"(the columns are {', '.join(present)})"
            )
    names = _names(dataset, tags_column)
    sentences = []
    for index, row in rows(dataset, [tokens_column, tags_column], name):
        words, tags = row[tokens_column], row[tags_column]
        for column, value in ((tokens_column, words), (tags_column, tags)):
            if not isinstance(value, list):
                raise DataError(f"{name}: row {index}: column '{column}' must be a list, got {value!r}")
        if len(words) != len(tags):
            raise DataError(
                f"{name}: row {index}: {len(words)} words in '{tokens_column}' but {len(tags)} tags "
                f"in '{tags_column}'"
            )
        if not words or list(words) == [DOCSTART]:
            continue
        found = tuple(_string(w, index, tokens_column, name) for w in words)
        labels = tuple(_label(t, names, index, tags_column, name) for t in tags)
        sentences.append(Sentence(found, labels, (index,) * len(found)))
    if not sentences:
        raise DataError(f"{name}: no sentences with words")
    return sentences


def sentence_pairs(
    dataset: Any,
    name: str,
    source_column: str,
    target_column: str,
    languages: tuple[str, str] | None = None,
) -> list[tuple[str, str]]:
    """The sentence pairs of a split for translation, as :func:`vaswani.data.readers.read_parallel`
    reads two files: from ``source_column`` and ``target_column``, or with ``languages`` (source,
    target) from Hugging Face's translation layout, the ``translation`` column's dictionaries. An
    empty sentence is refused, as an empty line is."""
    columns = [TRANSLATION] if languages is not None else [source_column, target_column]
    present = _columns(dataset)
    if languages is None and TRANSLATION in present and source_column not in present:
        raise DataError(
            f"{name}: no column '{source_column}'; to read the '{TRANSLATION}' column, give its "
            "languages with --source-lang and --target-lang"
        )
    pairs = []
    for index, row in rows(dataset, columns, name):
        if languages is not None:
            entry = row[TRANSLATION]
            if not isinstance(entry, dict) or any(lang not in entry for lang in languages):
                have = ", ".join(entry) if isinstance(entry, dict) else repr(entry)
                raise DataError(
                    f"{name}: row {index}: column '{TRANSLATION}' has no '{languages[0]}' and "
                    f"'{languages[1]}' (it has {have})"
                )
            found = [(f"{TRANSLATION}.{lang}", entry[lang]) for lang in languages]
        else:
            found = [(c, row[c]) for c in columns]
        src, tgt = (_string(value, index, column, name) for column, value in found)
        for (column, _), text in zip(found, (src, tgt), strict=True):
            if not text.strip():
                raise DataError(f"{name}: row {index}: empty sentence in column '{column}'")
        pairs.append((src, tgt))
    return pairs


def split_name(path: str | Path, split: str) -> str:
    """How messages and reports name a split of a dataset: ``PATH[split]``."""
    return f"{path}[{split}]"
