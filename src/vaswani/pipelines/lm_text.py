"""A language model's text: the documents of a run, one stream of token ids, the windows cut from
it, and the next-token loss over them (what the lm task trains and scores, and what a GPT
classifier's auxiliary loss and the benchmarks measure).

A streamed dataset (``data.streaming``) is never held whole: its documents are read a batch at a
time, the tokenizer is trained on its first :data:`TOKENIZER_SAMPLE_CHARS` characters, and its token
ids are written to a file (:data:`STREAM_FILE`, in the run directory) that training memory-maps; a
corpus that fits in memory gives the same ids, and so the same batches, either way."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from vaswani.data import hf_datasets
from vaswani.data.config import TextData
from vaswani.data.text import DEFAULT_TEXT, default_documents, read_documents, split_documents
from vaswani.errors import ConfigError, DataError
from vaswani.models.gpt import GPT
from vaswani.pipelines.common import model_device
from vaswani.tokenizer import LMTokenizer


def load_documents(spec: TextData) -> tuple[list[str], str]:
    """The documents of a run and a name for them."""
    if spec.source == "default":
        return default_documents(), DEFAULT_TEXT
    if spec.source != "text" or not spec.text:
        raise ConfigError("config field 'data.text': a language model needs text files (--text)")
    return read_documents(spec.text), ", ".join(spec.text)


def split_text(
    spec: TextData, check: Callable[[list[str]], None] | None = None
) -> tuple[list[str], list[str], str]:
    """The training and validation documents of a run, and a name for them: a dataset's ``split``
    and ``dev_split`` (or ``validation``), or else the last ``valid_fraction`` of its text held out
    (:func:`~vaswani.data.text.split_documents`). ``check`` is called with the whole text first."""
    if spec.source == "dataset":
        assert spec.dataset is not None  # TextData checks it
        splits = hf_datasets.open_splits(spec.dataset)
        train, name = _dataset_documents(splits, spec, spec.split)
        documents = list(train)
        dev = hf_datasets.dev_split_name(splits, spec.dev_split, spec.dataset)
        if dev is not None:
            valid = list(_dataset_documents(splits, spec, dev)[0])
            if check is not None:
                check(documents + valid)
            return documents, valid, name
    else:
        documents, name = load_documents(spec)
    if check is not None:
        check(documents)
    return *split_documents(documents, spec.valid_fraction), name


def _dataset_documents(splits: dict[str, object], spec: TextData, split: str) -> tuple[Iterator[str], str]:
    """The documents of ``split`` of the dataset ``splits`` (read as they are asked for), and its name."""
    assert spec.dataset is not None
    name = hf_datasets.split_name(spec.dataset, split)
    found = hf_datasets.split_of(splits, split, spec.dataset)
    return hf_datasets.documents(found, spec.text_column, name), name


STREAM_FILE = "train_tokens.int32"
"""The token ids of a streamed dataset's training split, in the run directory (int32, native order)."""
TOKENIZER_SAMPLE_CHARS = 50_000_000
"""The characters at the start of a streamed corpus that its tokenizer is trained on."""
ENCODE_DOCUMENTS = 1024  # documents tokenized at a time


def streamed_text(spec: TextData) -> tuple[Callable[[], Iterator[str]], list[str], str]:
    """A streamed dataset's training documents (a function that reads the split anew each time it
    is called), its validation documents (``dev_split`` or ``validation``, in memory: a streamed
    corpus holds out no tail) and the training split's name."""
    assert spec.dataset is not None
    splits = hf_datasets.open_splits(spec.dataset, streaming=True)
    dev = hf_datasets.dev_split_name(splits, spec.dev_split, spec.dataset)
    if dev is None:
        raise DataError(
            f"{spec.dataset}: a streamed dataset needs a split to score on: name it with --dev-split "
            f"(the dataset has {', '.join(sorted(splits))})"
        )
    name = hf_datasets.split_name(spec.dataset, spec.split)
    valid = list(_dataset_documents(splits, spec, dev)[0])
    train = _dataset_documents(splits, spec, spec.split)[0]
    next(train, None)  # a missing split or column, or no rows, refused now

    return lambda: _dataset_documents(splits, spec, spec.split)[0], valid, name


def tokenizer_sample(documents: Iterable[str], chars: int = TOKENIZER_SAMPLE_CHARS) -> list[str]:
    """The first documents of ``documents`` up to ``chars`` characters (the one at the limit cut)."""
    sample, seen = [], 0
    for document in documents:
        if seen >= chars:
            break
        sample.append(document[: chars - seen])
        seen += len(sample[-1])
    return sample


def stream_ids(tok: LMTokenizer, documents: Iterable[str], path: Path) -> Tensor:
    """The ids :func:`encode_documents` gives ``documents``, written to ``path`` (int32) a batch of
    documents at a time and memory-mapped back; an existing ``path`` (a resumed run's) is read as it
    is. The file is written beside under a temporary name and renamed once whole."""
    if not path.is_file():
        partial = path.with_name(path.name + ".partial")
        with partial.open("wb") as out:
            chunks = iter(documents)
            while batch := list(itertools.islice(chunks, ENCODE_DOCUMENTS)):
                encode_documents(tok, batch).to(torch.int32).numpy().tofile(out)
        os.replace(partial, path)
    count = path.stat().st_size // 4
    if count == 0:
        raise DataError(f"{path}: the streamed training text has no tokens")
    return torch.from_file(str(path), shared=False, size=count, dtype=torch.int32)


def encode_documents(tok: LMTokenizer, documents: Sequence[str]) -> Tensor:
    """One stream of token ids, each document followed by the end of text (and preceded by the
    tokenizer's BOS when it has one)."""
    ids: list[int] = []
    for encoded in tok.encode_batch(documents):
        ids.extend(encoded)
        ids.append(tok.eos_id)
    return torch.tensor(ids, dtype=torch.long)


def run_tokenizer(path: Path, data: TextData) -> LMTokenizer:
    """The tokenizer of a run, with the special tokens its data section names."""
    return LMTokenizer.load(path, eos_token=data.eos_token, bos_token=data.bos_token)


def windows(ids: Tensor, starts: Tensor, length: int) -> Tensor:
    """The (len(starts), length) windows ``ids[s : s + length]``."""
    return ids[starts[:, None] + torch.arange(length)]


def next_token_loss(model: nn.Module, chunk: Tensor, vocab_size: int | None = None) -> tuple[Tensor, int]:
    """Summed cross-entropy of predicting ``chunk[:, 1:]`` from ``chunk[:, :-1]``, and the count.

    With ``vocab_size`` (the tokenizer's), the softmax runs over the real tokens only: the rows
    that pad the embedding to a multiple of 64 are never targets, and generation never picks
    them, so no probability is spent on them. The head and the loss run as one chunked pass
    (:func:`~vaswani.layers.cross_entropy.linear_cross_entropy`, through the model's forward so
    that DDP, FSDP and compilation see it): the (rows, length, vocab) logits are never held whole.
    """
    targets = chunk[:, 1:]
    return model(chunk[:, :-1], targets=targets, n_classes=vocab_size), targets.numel()


@torch.no_grad()
def stream_loss(
    model: GPT,
    ids: Tensor,
    batch_size: int = 16,
    max_windows: int | None = None,
    vocab_size: int | None = None,
    length: int | None = None,
) -> float:
    """Mean next-token loss (nats) over ``ids``, cut into non-overlapping windows of ``length``
    tokens of context (default: the model's ``max_len``), so that each token is predicted once
    (at most ``max_windows`` windows, spread evenly over the text); ``vocab_size`` as in
    :func:`next_token_loss`. The windows are cut from ``ids`` where it is and run on the model's
    device."""
    context = model.config.max_len if length is None else length
    device = model_device(model)
    starts = torch.arange(0, max(1, len(ids) - 1), context)
    if max_windows is not None and len(starts) > max_windows:
        starts = starts[torch.linspace(0, len(starts) - 1, max_windows).long()]
    total, count = 0.0, 0
    for i in range(0, len(starts), batch_size):
        group = starts[i : i + batch_size]
        full = group[group + context + 1 <= len(ids)]
        if len(full):
            loss, n = next_token_loss(model, windows(ids, full, context + 1).to(device), vocab_size)
            total, count = total + float(loss), count + n
        for start in group[group + context + 1 > len(ids)].tolist():  # the short last window
            loss, n = next_token_loss(model, ids[start:][None].to(device), vocab_size)
            total, count = total + float(loss), count + n
    if count == 0:
        raise DataError("the text has fewer than two tokens: nothing to predict")
    return total / count


class WindowBatches(Sequence[Tensor]):
    """The training batches of :class:`LMTask`, each built when it is read: batch ``i`` is the
    (batch_size, length) windows at ``starts[i·batch_size : (i+1)·batch_size]`` (overlapping
    windows are never all held at once)."""

    def __init__(self, ids: Tensor, starts: Tensor, batch_size: int, length: int, n_batches: int) -> None:
        self.ids, self.starts, self.batch_size = ids, starts, batch_size
        self.length, self.n = length, n_batches

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tensor:  # type: ignore[override]
        if not 0 <= i < self.n:
            raise IndexError(i)
        starts = self.starts[i * self.batch_size : (i + 1) * self.batch_size]
        return windows(self.ids, starts, self.length).long()  # a streamed text's ids are int32
