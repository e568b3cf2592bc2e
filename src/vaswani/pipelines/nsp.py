"""Next-sentence prediction, BERT's second pretraining objective (Devlin et al. 2019, section 3.1),
trained beside the masked LM (``vaswani train mlm --nsp``; the trainer's adapter is
:class:`vaswani.tasks.mlm.NSPTask`): its sentence pairs, their batches and their scores.

A document is a blank-line-separated block of a text (each file, or each topic of the default
text, holds one or more), and its sentences are its non-blank lines, one sentence a line (the
input format of BERT's ``create_pretraining_data.py``). Every sentence A that has a next sentence
in its document starts one pair, drawn by a :class:`random.Random` seeded with the run's seed (so
that a resumed run, or an evaluation, draws the same pairs):

    IsNext  (probability 1/2): B = the sentence after A
    NotNext (probability 1/2): B = a random sentence of a random other document

The other document is drawn uniformly from the split's documents but A's (from the other split's
too when the split holds a single document), then the sentence uniformly from it. A pair is the
row ``[CLS] A [SEP] B [SEP]`` with segment ids 0 over ``[CLS] A [SEP]`` and 1 over ``B [SEP]``,
cut to ``max_len`` as Hugging Face's tokenizer cuts a pair (``longest_first``: :func:`pair_row`),
so that a classifier fine-tuned on pairs reads them as they were pretrained. The masked-LM
corruption then applies to the row as to a window ([CLS] and both [SEP] are never chosen).

The loss of a batch is BERT's sum of the two means, L = L_MLM / n + L_NSP / r over its n chosen
tokens and r pairs, with L_NSP = -Σ_pairs log P(label | x̃) from the pooled [CLS] vector. The
trainer divides a batch's summed loss by its item count (the chosen tokens), so the pairs' term
is scaled by n / r. Validation reports the masked-token loss, perplexity and accuracy and the
next-sentence loss and accuracy; ``valid_loss`` is their sum, as the training loss.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.data.batching import pad, token_buckets
from vaswani.errors import ConfigError, DataError
from vaswani.models.bert import IS_NEXT, NOT_NEXT
from vaswani.pipelines.common import on_model_device
from vaswani.tokenizer import WordPieceTokenizer

Masking = Callable[[Tensor, torch.Generator | None], tuple[Tensor, Tensor]]  # an mlm.Masker
Pair = tuple[list[int], list[int], int]  # the pieces of A and of B, and IS_NEXT or NOT_NEXT
ONE_DOCUMENT = (
    "the text is a single document, and next-sentence prediction (--nsp) draws its NotNext "
    "sentences from other documents: separate documents by a blank line, or give several files"
)


def check_nsp_model(model: ModelConfig) -> None:
    """Refuse, naming the field, a model that cannot learn next-sentence prediction: it needs the
    pooler (which the NSP head reads), two segments or more and a ``max_len`` of at least 5."""
    needs = {
        "pooler": (model.pooler, "the [CLS] pooler, which the NSP head reads"),
        "type_vocab_size": (model.type_vocab_size >= 2, "two segments (A and B), >= 2"),
        "max_len": (model.max_len >= 5, "room for [CLS] A [SEP] B [SEP], >= 5"),
    }
    for name, (met, what) in needs.items():
        if not met:
            raise ConfigError(f"config field 'model.{name}': --nsp needs {what}, got {getattr(model, name)}")


def documents_of(texts: Sequence[str]) -> list[list[str]]:
    """The documents of ``texts``: each text's blank-line-separated blocks, as the list of their
    non-blank lines (stripped)."""
    documents = []
    for text in texts:
        block: list[str] = []
        for line in (*text.splitlines(), ""):
            if line.strip():
                block.append(line.strip())
            elif block:
                documents.append(block)
                block = []
    return documents


def check_documents(texts: Sequence[str]) -> None:
    """Refuse a text of fewer than two documents (before it is split: the split cuts the document
    at its end in two), whose NotNext sentences would have nowhere to come from."""
    if len(documents_of(texts)) < 2:
        raise DataError(ONE_DOCUMENT)


def tokenized_documents(tokenizer: WordPieceTokenizer, texts: Sequence[str]) -> list[list[list[int]]]:
    """The pieces of each sentence of each document of ``texts`` (:func:`documents_of`); a sentence
    of no pieces is left out, and so is a document left without sentences."""
    documents = documents_of(texts)
    pieces = iter(tokenizer.encode_pieces_batch([s for d in documents for s in d]))
    tokenized = [[ids for ids in (next(pieces) for _ in d) if ids] for d in documents]
    return [d for d in tokenized if d]


def draw_pairs(
    documents: Sequence[Sequence[list[int]]], seed: int, spare: Sequence[Sequence[list[int]]] = ()
) -> list[Pair]:
    """One pair per sentence with a next sentence in its document, IsNext or NotNext by a fair
    coin (see the module docstring), drawn by ``random.Random(seed)``; a NotNext sentence comes
    from another of ``documents``, or of ``spare`` too when ``documents`` are only one. Fewer
    than two documents in all, or no document of two sentences, is a :class:`DataError`."""
    pool = [*documents, *spare] if len(documents) < 2 else list(documents)
    if len(pool) < 2:
        raise DataError(ONE_DOCUMENT)
    rng = random.Random(seed)
    pairs: list[Pair] = []
    for d, sentences in enumerate(documents):
        for i in range(len(sentences) - 1):
            if rng.random() < 0.5:
                pairs.append((sentences[i], sentences[i + 1], IS_NEXT))
            else:
                other = rng.randrange(len(pool) - 1)
                other += other >= d  # every document but A's
                pairs.append((sentences[i], pool[other][rng.randrange(len(pool[other]))], NOT_NEXT))
    if not pairs:
        raise DataError(
            "no document has two sentences for next-sentence prediction (--nsp): write one sentence a line"
        )
    return pairs


def pair_row(
    first: Sequence[int], second: Sequence[int], cls_id: int, sep_id: int, max_len: int
) -> tuple[list[int], list[int]]:
    """``[CLS] A [SEP] B [SEP]`` and its segment ids (0 then 1), cut to ``max_len`` (at least 5) as
    Hugging Face's ``longest_first`` cuts a pair: the shorter of A and B (A on a tie) keeps at most
    half the room, ⌊(max_len - 3) / 2⌋ pieces, the other the rest; each loses its last pieces."""
    room = max_len - 3
    a, b = list(first), list(second)
    if len(a) + len(b) > room:
        short = min(len(a), len(b), room // 2)
        a, b = (a[: room - short], b[:short]) if len(a) > len(b) else (a[:short], b[: room - short])
    return [cls_id, *a, sep_id, *b, sep_id], [0] * (len(a) + 2) + [1] * (len(b) + 1)


@dataclass
class PairBatch:
    """Padded pair rows: ``tokens`` and ``segments`` (batch, seq) and the next-sentence ``labels``
    (batch,); for validation also the fixed corruption, ``inputs`` and ``chosen`` (batch, seq)."""

    tokens: Tensor
    segments: Tensor
    labels: Tensor
    inputs: Tensor | None = None
    chosen: Tensor | None = None


def pair_batches(
    pairs: Sequence[Pair], tokenizer: WordPieceTokenizer, max_len: int, batch_tokens: int, seed: int
) -> list[PairBatch]:
    """``pairs`` as rows of at most ``max_len`` tokens, in padded batches of at most ``batch_tokens``
    tokens, rows of similar length together (shuffled by ``seed``)."""
    rows = [pair_row(a, b, tokenizer.cls_id, tokenizer.sep_id, max_len) for a, b, _ in pairs]
    batches = []
    for indices in token_buckets([len(ids) for ids, _ in rows], batch_tokens, seed):
        batches.append(
            PairBatch(
                pad([rows[i][0] for i in indices], tokenizer.pad_id),
                pad([rows[i][1] for i in indices], 0),
                torch.tensor([pairs[i][2] for i in indices]),
            )
        )
    return batches


def masked_pair_batches(
    pairs: Sequence[Pair],
    tokenizer: WordPieceTokenizer,
    masker: Masking,
    max_len: int,
    batch_tokens: int,
    seed: int,
) -> list[PairBatch]:
    """:func:`pair_batches` corrupted once by a generator seeded with ``seed`` (validation's)."""
    generator = torch.Generator().manual_seed(seed)
    batches = pair_batches(pairs, tokenizer, max_len, batch_tokens, seed)
    for batch in batches:
        batch.inputs, batch.chosen = masker(batch.tokens, generator)
    return batches


def pretraining_logits(
    model: nn.Module, batch: PairBatch, inputs: Tensor, chosen: Tensor, pad_id: int, vocab_size: int
) -> tuple[Tensor, Tensor]:
    """The masked-LM logits (n, vocab) of the n ``chosen`` positions of ``inputs`` (the rows of
    ``batch`` corrupted) and the next-sentence logits (batch, 2), in float32."""
    mlm, nsp = model(inputs, batch.segments, inputs != pad_id, predict=chosen, next_sentence=True)
    return mlm[..., :vocab_size].float(), nsp.float()


@torch.no_grad()
def pretraining_metrics(
    model: nn.Module, batches: Sequence[PairBatch], pad_id: int, vocab_size: int
) -> dict[str, float]:
    """The masked-token loss (mean nats per chosen token), perplexity and accuracy, the
    next-sentence loss (mean nats per pair) and accuracy, and ``valid_loss``, the sum of the two
    losses, over corrupted ``batches`` (moved to the model's device)."""
    masked, correct, count, nsp_total, nsp_correct, rows = 0.0, 0, 0, 0.0, 0, 0
    for batch in (on_model_device(model, b) for b in batches):
        assert batch.inputs is not None and batch.chosen is not None
        mlm, nsp = pretraining_logits(model, batch, batch.inputs, batch.chosen, pad_id, vocab_size)
        targets = batch.tokens[batch.chosen]
        masked += float(F.cross_entropy(mlm, targets, reduction="sum"))
        correct += int((mlm.argmax(dim=-1) == targets).sum())
        count += len(targets)
        nsp_total += float(F.cross_entropy(nsp, batch.labels, reduction="sum"))
        nsp_correct += int((nsp.argmax(dim=-1) == batch.labels).sum())
        rows += len(batch.labels)
    if count == 0:
        raise DataError("no token was chosen for prediction: the text is too short to score")
    mlm_loss, nsp_loss = masked / count, nsp_total / rows
    return {
        "valid_loss": mlm_loss + nsp_loss,
        "masked_loss": mlm_loss,
        "perplexity": math.exp(min(mlm_loss, 50.0)),
        "masked_accuracy": correct / count,
        "nsp_loss": nsp_loss,
        "nsp_accuracy": nsp_correct / rows,
    }


def evaluate_pairs(
    model: nn.Module,
    tokenizer: WordPieceTokenizer,
    masker: Masking,
    texts: Sequence[str],
    batch_tokens: int,
    seed: int,
) -> dict[str, float]:
    """:func:`pretraining_metrics` of ``model`` (with the NSP head) on the pairs of the documents
    of ``texts``, drawn and corrupted with ``seed``."""
    pairs = draw_pairs(tokenized_documents(tokenizer, texts), seed)
    max_len = model.config.max_len  # type: ignore[union-attr]
    batches = masked_pair_batches(pairs, tokenizer, masker, max_len, batch_tokens, seed)
    model.eval()
    return pretraining_metrics(model, batches, tokenizer.pad_id, tokenizer.vocab_size)
