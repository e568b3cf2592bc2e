"""Sentence and token embeddings of any BERT run (``mlm``, ``encoder``, ``classify`` or ``tag``): the
wrapper of the ``encoder`` task.

v(x) is the mean of the real tokens' final hidden states (or the pooled [CLS] state), by default
L2-normalised so that the dot product is the cosine similarity (Sentence-BERT's recipe). A token's
contextual vector is its final hidden state h_i; a word's, in one sentence, the mean of the hidden
states of its WordPiece pieces (the same word in different contexts gets different vectors).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.data.config import LabeledData, TagData
from vaswani.errors import DataError
from vaswani.models.bert import Bert, sentence_vectors
from vaswani.pipelines import classify, tag
from vaswani.pipelines.bert import BERT_TASKS, encode_texts, read_bert_run, text_batch
from vaswani.pipelines.bert import model_of as bert_model_of
from vaswani.pipelines.common import on_model_device
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device
from vaswani.tokenizer import WordPieceTokenizer

# the runs with a BERT encoder, and their data; the builders of the models that are not a BERT run's
EMBED_TASKS = {**BERT_TASKS, classify.TASK: LabeledData, tag.TASK: TagData}
FINE_TUNED = {classify.TASK: classify.model_of, tag.TASK: tag.model_of}


class SentenceEncoder:
    """Contextual sentence embeddings of a BERT run: ``SentenceEncoder.load(run_dir).embed([...])``."""

    def __init__(self, bert: Bert, tokenizer: WordPieceTokenizer) -> None:
        self.model, self.tokenizer = bert, tokenizer

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> SentenceEncoder:
        """The encoder of an ``mlm``, ``encoder``, ``classify`` or ``tag`` run on ``device`` (auto,
        cpu, cuda, cuda:N, mps; the weights read on the CPU, then moved)."""
        where = resolve_device(device)
        run, tokenizer = read_bert_run(Path(run_dir), EMBED_TASKS, "embed")
        model = RunDir(run_dir).load_weights(FINE_TUNED.get(run.task, bert_model_of)(run)).to(where)
        bert = model if isinstance(model, Bert) else model.bert
        return cls(bert.eval(), tokenizer)

    def embed(
        self, texts: Sequence[str], pool: str = "mean", normalize: bool = True, batch_size: int = 64
    ) -> Tensor:
        """v(x) (n, d_model) of each text (see :func:`sentence_vectors`), cut to the model's
        max_len, divided by its L2 norm with ``normalize``, computed on the model's device and
        returned on the CPU; no texts give a (0, d_model) tensor."""
        self.model.eval()
        out = []
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                chunk = [(t,) for t in texts[start : start + batch_size]]
                batch = text_batch(encode_texts(self.tokenizer, chunk), self.tokenizer.pad_id)
                batch = on_model_device(self.model, batch)
                hidden = self.model(batch.tokens, batch.segments, batch.mask)
                out.append(sentence_vectors(self.model, hidden, batch.mask, pool).float().cpu())
        vectors = torch.cat(out) if out else torch.empty(0, self.model.config.d_model)
        return F.normalize(vectors, dim=-1) if normalize else vectors

    @torch.no_grad()
    def token_vectors(self, text: str) -> tuple[list[int], Tensor]:
        """The ids of ``[CLS] text [SEP]`` (cut to the model's max_len) and each token's contextual
        vector, its final hidden state (seq, d_model), on the CPU."""
        self.model.eval()
        batch = on_model_device(
            self.model, text_batch(encode_texts(self.tokenizer, [(text,)]), self.tokenizer.pad_id)
        )
        hidden = self.model(batch.tokens, batch.segments, batch.mask)[0]
        return batch.tokens[0].tolist(), hidden.float().cpu()

    def word_vectors(self, word: str, texts: Sequence[str]) -> Tensor:
        """The contextual vector of ``word`` in each text (n, d_model): the mean of the final hidden
        states of its pieces at its first occurrence (a word is matched after the tokenizer's
        normalisation, so an uncased model matches any case; a ``word`` of several words matches
        them in a row). A text without it is a one-line :class:`DataError` naming the text."""
        vectors = []
        for number, text in enumerate(texts, start=1):
            pieces = word_pieces(self.tokenizer, word, text)
            if not pieces:
                raise DataError(f"text {number} does not contain the word {word!r}: {text}")
            _, hidden = self.token_vectors(text)
            vectors.append(hidden[pieces].mean(dim=0))
        return torch.stack(vectors) if vectors else torch.empty(0, self.model.config.d_model)


def words_of(tokenizer: WordPieceTokenizer, text: str) -> list[str]:
    """The words of ``text`` as the tokenizer sees them: normalised (lowercased, for an uncased
    model), then split on whitespace and punctuation."""
    inner = tokenizer.tokenizer
    normalized = inner.normalizer.normalize_str(text) if inner.normalizer is not None else text
    return [w for w, _ in inner.pre_tokenizer.pre_tokenize_str(normalized)]


def word_pieces(tokenizer: WordPieceTokenizer, word: str, text: str) -> list[int]:
    """The positions in ``[CLS] text [SEP]`` of the pieces of the first occurrence of ``word``
    (one word or several in a row); [] when the text does not hold it (or it lies past max_len)."""
    target, words = words_of(tokenizer, word), words_of(tokenizer, text)
    if not target:
        raise DataError(f"--word {word!r} has no word in it")
    for start in range(len(words) - len(target) + 1):
        if words[start : start + len(target)] == target:
            word_ids = tokenizer.tokenizer.encode(text).word_ids
            return [i for i, w in enumerate(word_ids) if w is not None and start <= w < start + len(target)]
    return []
