"""What every BERT-family run shares: the tasks whose model is a BERT encoder with or without the
masked-LM head (``mlm``, ``encoder``), their ``tokenizer.json``, reading such a run, and turning
texts or sentence pairs into ``[CLS] A [SEP] (B [SEP])`` batches.

An ``encoder`` run is a BERT without its MLM head, as imported from a ``BertModel`` (such as the
sentence-transformers checkpoint all-MiniLM-L6-v2): commands that need the head (fill-mask) refuse
it by its task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from vaswani.config import RunConfig
from vaswani.data.batching import pad
from vaswani.data.config import DataConfig, TextData
from vaswani.errors import ConfigError, RunDirError
from vaswani.io import atomic_write
from vaswani.models.bert import Bert, MaskedLM
from vaswani.rundir import RunDir
from vaswani.tokenizer import WordPieceTokenizer

MLM_TASK = "mlm"
ENCODER_TASK = "encoder"
BERT_TASKS = {MLM_TASK: TextData, ENCODER_TASK: TextData}  # task → the class of its data section
TOKENIZER = "tokenizer.json"


def read_bert_run(
    run_dir: Path, tasks: Mapping[str, type[DataConfig]], purpose: str
) -> tuple[RunConfig, WordPieceTokenizer]:
    """The config and tokenizer of a BERT-family run directory whose task is one of ``tasks``
    (task → the class of its data section; anything else is refused in one line saying what
    ``purpose`` needs)."""
    folder = RunDir(run_dir)
    run = folder.read_config()
    if run.task in tasks:
        run = folder.read_config(run.task, tasks[run.task])
    if run.task not in tasks:
        raise RunDirError(
            f"{run_dir}: a run of task {run.task!r}; {purpose} needs a run of task {' or '.join(tasks)}"
        )
    if run.model.arch != "encoder_only":
        raise RunDirError(f"{run_dir}: a GPT {run.task} run (decoder-only); {purpose} needs a BERT run")
    tokenizer = WordPieceTokenizer.load(run_dir / TOKENIZER, run.model.max_len)
    check_tokenizer(run, tokenizer, run_dir)
    return run, tokenizer


def check_tokenizer(run: RunConfig, tokenizer: WordPieceTokenizer, run_dir: Path) -> None:
    """Refuse a tokenizer whose vocabulary does not fit the model, or whose [PAD] is not the model's."""
    if tokenizer.vocab_size > run.model.vocab_size:
        raise ConfigError(
            f"{run_dir / TOKENIZER}: vocabulary of {tokenizer.vocab_size} does not fit the model's "
            f"embedding of {run.model.vocab_size}"
        )
    if tokenizer.pad_id != run.model.pad_id:
        raise ConfigError(
            f"{run_dir / TOKENIZER}: [PAD] is {tokenizer.pad_id}, the model's pad_id is {run.model.pad_id}"
        )


def save_tokenizer(tokenizer: WordPieceTokenizer, run_dir: Path) -> None:
    """``tokenizer.json`` as ``import-hf`` writes it (the length limit is the model's max_len)."""
    atomic_write(run_dir / TOKENIZER, tokenizer.to_json())


def model_of(run: RunConfig) -> Bert | MaskedLM:
    """The model of a BERT run: :class:`MaskedLM` for task ``mlm`` (with the next-sentence head
    when ``data.nsp``), :class:`Bert` (no head) for task ``encoder``."""
    if run.task not in BERT_TASKS:
        raise RunDirError(f"a run of task {run.task!r} is not a BERT run ({MLM_TASK} or {ENCODER_TASK})")
    if run.task != MLM_TASK:
        return Bert(run.model)
    return MaskedLM(run.model, nsp=isinstance(run.data, TextData) and run.data.nsp)


@dataclass
class TextBatch:
    """Padded ``[CLS] A [SEP] (B [SEP])`` rows: ``tokens``, ``segments``, ``mask`` (True at real
    tokens), all (batch, seq), and the gold class ids (batch,) when known. A GPT classifier's rows
    (:mod:`vaswani.tasks.gpt_classify`) have no segments (None)."""

    tokens: Tensor
    segments: Tensor | None
    mask: Tensor
    labels: Tensor | None = None


Row = tuple[list[int], ...]  # one encoded text: its ids first (and a BERT's segment ids)


@dataclass(frozen=True)
class TextReader:
    """How a classifier reads texts (1-tuples) or sentence pairs (2-tuples): ``encode`` gives each
    its row, ``batch`` pads rows (and their class ids, when known) into one :class:`TextBatch`."""

    encode: Callable[[Sequence[tuple[str, ...]]], list[Row]]
    batch: Callable[[Sequence[Row], Sequence[int] | None], TextBatch]


def bert_reader(tokenizer: WordPieceTokenizer) -> TextReader:
    """BERT's reading: ``[CLS] A [SEP] (B [SEP])`` with segment ids (:func:`encode_texts`)."""
    return TextReader(
        lambda texts: encode_texts(tokenizer, texts),
        lambda rows, labels: text_batch(rows, tokenizer.pad_id, labels),  # type: ignore[arg-type]
    )


def encode_texts(
    tokenizer: WordPieceTokenizer, texts: Sequence[tuple[str, ...]]
) -> list[tuple[list[int], list[int]]]:
    """Ids and segment ids of each text (one string) or sentence pair (two; all of ``texts`` alike),
    truncated to the tokenizer's ``max_len``."""
    if not texts:
        return []
    if len(texts[0]) == 1:
        return tokenizer.encode_segments_batch([t[0] for t in texts])
    return tokenizer.encode_segments_batch([t[0] for t in texts], [t[1] for t in texts])


def text_batch(
    encoded: Sequence[tuple[list[int], list[int]]], pad_id: int, labels: Sequence[int] | None = None
) -> TextBatch:
    tokens = pad([ids for ids, _ in encoded], pad_id)
    return TextBatch(
        tokens,
        pad([segments for _, segments in encoded], 0),
        tokens != pad_id,
        None if labels is None else torch.tensor(list(labels)),
    )
