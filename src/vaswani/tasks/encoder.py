"""Sentence embeddings of any BERT run (``mlm``, ``encoder`` or ``classify``): the wrapper of the
``encoder`` task.

v(x) is the mean of the real tokens' final hidden states (or the pooled [CLS] state), by default
L2-normalised so that the dot product is the cosine similarity (Sentence-BERT's recipe).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.data.config import LabeledData
from vaswani.models.bert import Bert, sentence_vectors
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device
from vaswani.tasks import classify
from vaswani.tasks.bert import BERT_TASKS, encode_texts, read_bert_run, text_batch
from vaswani.tasks.bert import model_of as bert_model_of
from vaswani.tasks.evaluation import on_model_device
from vaswani.tokenizer import WordPieceTokenizer

EMBED_TASKS = {**BERT_TASKS, classify.TASK: LabeledData}  # the runs with a BERT encoder, and their data


class SentenceEncoder:
    """Contextual sentence embeddings of a BERT run: ``SentenceEncoder.load(run_dir).embed([...])``."""

    def __init__(self, bert: Bert, tokenizer: WordPieceTokenizer) -> None:
        self.bert, self.tokenizer = bert, tokenizer

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> SentenceEncoder:
        """The encoder of an ``mlm``, ``encoder`` or ``classify`` run on ``device`` (auto, cpu,
        cuda, cuda:N, mps; the weights read on the CPU, then moved)."""
        where = resolve_device(device)
        run, tokenizer = read_bert_run(Path(run_dir), EMBED_TASKS, "embed")
        model = (
            RunDir(run_dir)
            .load_weights(classify.model_of(run) if run.task == classify.TASK else bert_model_of(run))
            .to(where)
        )
        bert = model if isinstance(model, Bert) else model.bert
        return cls(bert.eval(), tokenizer)

    def embed(
        self, texts: Sequence[str], pool: str = "mean", normalize: bool = True, batch_size: int = 64
    ) -> Tensor:
        """v(x) (n, d_model) of each text (see :func:`sentence_vectors`), cut to the model's
        max_len, divided by its L2 norm with ``normalize``, computed on the model's device and
        returned on the CPU; no texts give a (0, d_model) tensor."""
        self.bert.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                chunk = [(t,) for t in texts[start : start + batch_size]]
                batch = text_batch(encode_texts(self.tokenizer, chunk), self.tokenizer.pad_id)
                batch = on_model_device(self.bert, batch)
                hidden = self.bert(batch.tokens, batch.segments, batch.mask)
                out.append(sentence_vectors(self.bert, hidden, batch.mask, pool).float().cpu())
        vectors = torch.cat(out) if out else torch.empty(0, self.bert.config.d_model)
        return F.normalize(vectors, dim=-1) if normalize else vectors
