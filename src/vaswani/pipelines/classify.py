"""A ``classify`` run in use: a fine-tuned classifier, BERT's or GPT's (GPT-1's fine-tuning: the
text's tokens, its last real token's state or the mean of its states classified), how each kind
reads a text or a pair, and :class:`TextClassifier`, which predicts labels and scores a labeled
file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig
from vaswani.data.batching import pad
from vaswani.data.config import LabeledData
from vaswani.data.labeled import LabeledFile
from vaswani.errors import ConfigError
from vaswani.metrics import accuracy_and_macro_f1
from vaswani.models.bert import BertClassifier
from vaswani.models.gpt_classifier import GPTClassifier
from vaswani.pipelines.bert import (
    Row,
    TextBatch,
    TextReader,
    bert_reader,
    read_bert_run,
)
from vaswani.pipelines.common import on_model_device
from vaswani.pipelines.lm import check_vocab
from vaswani.pipelines.lm_text import run_tokenizer
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device
from vaswani.tokenizer import LMTokenizer, WordPieceTokenizer

TASK = "classify"
TOKENIZER = "tokenizer.json"  # a GPT classifier's (a BERT's is pipelines.bert's)


@torch.no_grad()
def classification_metrics(model: nn.Module, batches: Sequence[TextBatch]) -> dict[str, float]:
    """Mean cross-entropy, accuracy and macro-F1 of ``model`` on labeled ``batches`` (run on the
    model's device)."""
    total, predicted, gold = 0.0, [], []
    for batch in batches:
        assert batch.labels is not None
        on = on_model_device(model, batch)
        logits = class_logits(model, on).float()
        total += float(F.cross_entropy(logits, on.labels, reduction="sum"))
        predicted.append(logits.argmax(dim=-1).cpu())
        gold.append(batch.labels)
    accuracy, macro_f1 = accuracy_and_macro_f1(torch.cat(predicted), torch.cat(gold))
    count = sum(len(labels) for labels in gold)
    return {"valid_loss": total / count, "valid_accuracy": accuracy, "valid_macro_f1": macro_f1}


def class_logits(model: nn.Module, batch: TextBatch) -> Tensor:
    """The logits (batch, n_classes) of a BERT classifier (from the tokens, segments and mask) or
    of a GPT classifier (a batch without segments: from the tokens and mask)."""
    if batch.segments is None:
        return model(batch.tokens, batch.mask)[0]
    return model(batch.tokens, batch.segments, batch.mask)


class TextClassifier:
    """A fine-tuned classifier (BERT's or GPT's) with its tokenizer and labels:
    ``TextClassifier.load(run_dir).predict([("a text",)])``."""

    def __init__(
        self,
        model: BertClassifier | GPTClassifier,
        tokenizer: WordPieceTokenizer | LMTokenizer,
        data: LabeledData,
    ) -> None:
        if data.labels is None:
            raise ConfigError("config field 'data.labels': a classifier run needs its label set")
        self.model, self.tokenizer, self.data = model, tokenizer, data
        self.reader = reader_of(model, tokenizer)
        self.labels: tuple[str, ...] = data.labels
        self.n_texts = len(data.text_columns or ("text",))

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> TextClassifier:
        """The classifier of a ``classify`` run on ``device`` (auto, cpu, cuda, cuda:N, mps; the
        weights read on the CPU, then moved)."""
        where = resolve_device(device)
        run, tokenizer = read_classifier_run(Path(run_dir))
        model = RunDir(run_dir).load_weights(model_of(run)).to(where)
        return cls(model.eval(), tokenizer, run.data)

    def probabilities(self, texts: Sequence[tuple[str, ...]], batch_size: int = 64) -> Tensor:
        """p(y | x) (n, n_classes) of each text (a 1-tuple) or sentence pair (a 2-tuple), cut to
        the model's max_len, computed on the model's device and returned on the CPU; no texts
        give a (0, n_classes) tensor."""
        self.model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                chunk = texts[start : start + batch_size]
                batch = on_model_device(self.model, self.reader.batch(self.reader.encode(chunk), None))
                logits = class_logits(self.model, batch)
                out.append(logits.float().softmax(dim=-1).cpu())
        return torch.cat(out) if out else torch.empty(0, len(self.labels))

    def predict(self, texts: Sequence[tuple[str, ...]], batch_size: int = 64) -> list[tuple[str, float]]:
        """The most likely label of each text or pair, and its probability (``[]`` for no texts)."""
        probs, best = self.probabilities(texts, batch_size).max(dim=-1)
        return [(self.labels[i], p) for i, p in zip(best.tolist(), probs.tolist(), strict=True)]

    def evaluate(self, labeled: LabeledFile, batch_size: int = 64) -> dict[str, float]:
        """Loss, accuracy and macro-F1 on the examples of ``labeled`` (read with this run's labels)."""
        index = {label: i for i, label in enumerate(self.labels)}
        rows = self.reader.encode([e.texts for e in labeled.examples])
        labels = [index[e.label] for e in labeled.examples]
        batches = [
            self.reader.batch(rows[i : i + batch_size], labels[i : i + batch_size])
            for i in range(0, len(rows), batch_size)
        ]
        self.model.eval()
        return classification_metrics(self.model, batches)


def read_classifier_run(run_dir: Path) -> tuple[RunConfig, WordPieceTokenizer | LMTokenizer]:
    """The config and tokenizer of a ``classify`` run: a GPT classifier's (decoder-only) or a BERT's."""
    folder = RunDir(run_dir)
    found = folder.read_config()
    if found.task == TASK and found.model.arch == "decoder_only":
        run = folder.read_config(TASK, LabeledData)
        return run, classifier_tokenizer(folder.path, run)
    return read_bert_run(run_dir, {TASK: LabeledData}, "classification")


def model_of(run: RunConfig) -> BertClassifier | GPTClassifier:
    """The (untrained) model of a ``classify`` run: a GPT classifier when its model is
    decoder-only, else a BERT one."""
    if run.data.labels is None:
        raise ConfigError("config field 'data.labels': a classifier run needs its label set")
    if run.model.arch == "decoder_only":
        return GPTClassifier(run.model, len(run.data.labels), run.data.pool)
    return BertClassifier(run.model, len(run.data.labels), run.data.pool)


def classifier_tokenizer(run_dir: Path, run: RunConfig) -> LMTokenizer:
    """The tokenizer of a GPT classifier run, with the special tokens its data section keeps."""
    tokenizer = run_tokenizer(run_dir / TOKENIZER, run.data)
    check_vocab(run, tokenizer, run_dir)
    return tokenizer


def cut_pair(a: list[int], b: list[int], room: int) -> tuple[list[int], list[int]]:
    """``a`` and ``b`` cut to ``room`` tokens together, the longer first (each keeps at least
    half of ``room`` when both are longer)."""
    if len(a) + len(b) <= room:
        return a, b
    short = min(len(a), len(b), room // 2)
    if len(a) <= len(b):
        return a[:short], b[: room - short]
    return a[: room - short], b[:short]


def encode_gpt_texts(tokenizer: LMTokenizer, texts: Sequence[tuple[str, ...]], max_len: int) -> list[Row]:
    """The ids of each text (``A``, cut to ``max_len``; an empty one is the end-of-text token, as
    an empty prompt is) or sentence pair (``A <eos> B``, cut to ``max_len``, the longer part
    first), each as a 1-tuple row."""
    if not texts:
        return []
    parts = [tokenizer.encode_batch([t[k] for t in texts]) for k in range(len(texts[0]))]
    if len(parts) == 1:
        return [((ids or [tokenizer.eos_id])[:max_len],) for ids in parts[0]]
    rows: list[Row] = []
    for a, b in zip(*parts, strict=True):
        a, b = cut_pair(a, b, max_len - 1)
        rows.append(([*a, tokenizer.eos_id, *b],))
    return rows


def uncut_lengths(tokenizer: LMTokenizer, texts: Sequence[tuple[str, ...]]) -> list[int]:
    """The tokens of each text or pair as :func:`encode_gpt_texts` reads it before any cut."""
    parts = [tokenizer.encode_batch([t[k] for t in texts]) for k in range(len(texts[0]))] if texts else []
    return [max(1, sum(len(ids) for ids in row) + len(row) - 1) for row in zip(*parts, strict=True)]


def gpt_batch(rows: Sequence[Row], pad_id: int, labels: Sequence[int] | None = None) -> TextBatch:
    """Right-padded rows and their mask, True on the real tokens (from the lengths: the padding id,
    the end of text, is also the pairs' separator), without segment ids."""
    ids = [row[0] for row in rows]
    tokens = pad(ids, pad_id)
    lengths = torch.tensor([len(r) for r in ids])
    mask = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
    return TextBatch(tokens, None, mask, None if labels is None else torch.tensor(list(labels)))


def gpt_reader(tokenizer: LMTokenizer, max_len: int) -> TextReader:
    """A GPT classifier's reading of texts and pairs (:func:`encode_gpt_texts`, :func:`gpt_batch`)."""
    return TextReader(
        lambda texts: encode_gpt_texts(tokenizer, texts, max_len),
        lambda rows, labels: gpt_batch(rows, tokenizer.pad_id, labels),
    )


def reader_of(model: nn.Module, tokenizer: WordPieceTokenizer | LMTokenizer) -> TextReader:
    """How the classifier ``model`` reads texts: a GPT's rows (:func:`gpt_reader`) or BERT's
    ``[CLS] A [SEP]`` (:func:`~vaswani.pipelines.bert.bert_reader`)."""
    if isinstance(model, GPTClassifier):
        assert isinstance(tokenizer, LMTokenizer)
        return gpt_reader(tokenizer, model.config.max_len)
    assert isinstance(tokenizer, WordPieceTokenizer)
    return bert_reader(tokenizer)
