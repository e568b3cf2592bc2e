"""Monolingual text for language models: the user's files and folders, or the embedded default."""

from __future__ import annotations

from pathlib import Path

from vaswani.data.readers import read_lines
from vaswani.errors import DataError

DEFAULT_TEXT = "Python's documentation (pydoc_data.topics)"


def default_documents() -> list[str]:
    """The English prose of Python's own documentation, which ships with every CPython:
    one document per help topic, in a fixed order."""
    from pydoc_data.topics import topics

    return [topics[name].strip() for name in sorted(topics)]


def read_documents(paths: tuple[str, ...] | list[str]) -> list[str]:
    """One document per file; a folder stands for the files under it (sorted, hidden ones
    skipped). Errors name the file and line (missing, not UTF-8, empty)."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            if not found:
                raise DataError(f"{path}: folder has no files")
            files.extend(found)
        else:
            files.append(path)
    return ["\n".join(read_lines(f, allow_empty_lines=True)) for f in files]


def split_documents(documents: list[str], valid_fraction: float) -> tuple[list[str], list[str]]:
    """Hold out the last ``valid_fraction`` of the characters (the document at the cut is split
    in two), as nanoGPT holds out the end of its text."""
    total = sum(len(d) for d in documents)
    cut = int(total * (1 - valid_fraction))
    train: list[str] = []
    valid: list[str] = []
    seen = 0
    for doc in documents:
        if seen + len(doc) <= cut:
            train.append(doc)
        elif seen >= cut:
            valid.append(doc)
        else:
            train.append(doc[: cut - seen])
            valid.append(doc[cut - seen :])
        seen += len(doc)
    train, valid = [d for d in train if d], [d for d in valid if d]
    if not train or not valid:
        raise DataError(f"not enough text to hold out a validation split of {valid_fraction:.0%}")
    return train, valid
