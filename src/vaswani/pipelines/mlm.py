"""An ``mlm`` run in use: BERT's masked-LM corruption (Devlin et al. 2019, section 3.1), the
masked-token scores, and :class:`MaskedLanguageModel`, which fills in [MASK] and scores text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.data.batching import pad, token_buckets
from vaswani.data.config import TextData
from vaswani.errors import DataError
from vaswani.models.bert import MaskedLM
from vaswani.pipelines.bert import MLM_TASK, read_bert_run
from vaswani.pipelines.common import model_device, on_model_device
from vaswani.pipelines.nsp import evaluate_pairs
from vaswani.rundir import RunDir
from vaswani.runtime import resolve_device
from vaswani.tokenizer import WP_MASK, WordPieceTokenizer

TASK = MLM_TASK


def text_windows(tokenizer: WordPieceTokenizer, documents: Sequence[str], max_len: int) -> list[list[int]]:
    """``[CLS] x_1 … x_n [SEP]`` windows of at most ``max_len`` tokens: each document's pieces cut
    into consecutive runs of ``max_len - 2`` (the last one shorter)."""
    size = max_len - 2
    windows = []
    for ids in tokenizer.encode_pieces_batch(documents):
        for start in range(0, len(ids), size):
            windows.append([tokenizer.cls_id, *ids[start : start + size], tokenizer.sep_id])
    return windows


@dataclass(frozen=True)
class Masker:
    """BERT's corruption of a batch (see the module docstring): ``prob`` of the real tokens are
    chosen; of those, ``random`` get a random token, ``keep`` stay as they are, the rest [MASK]."""

    mask_id: int
    special_ids: Tensor  # never chosen: [PAD], [CLS], [SEP], [MASK]
    random_ids: Tensor  # what a random replacement draws from: every piece but the special tokens
    prob: float = 0.15
    random: float = 0.1
    keep: float = 0.1

    @classmethod
    def of(cls, tokenizer: WordPieceTokenizer, data: TextData) -> Masker:
        special = {tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id}
        ordinary = sorted(set(range(tokenizer.vocab_size)) - special - {tokenizer.unk_id})
        return cls(
            tokenizer.mask_id,
            torch.tensor(sorted(special)),
            torch.tensor(ordinary),
            data.mask_prob,
            data.mask_random,
            data.mask_keep,
        )

    def maskable(self, tokens: Tensor) -> Tensor:
        """True at the positions that may be chosen: real tokens, not [CLS], [SEP] or padding."""
        return ~torch.isin(tokens, self.special_ids)

    def __call__(self, tokens: Tensor, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """(x̃, c): the corrupted ``tokens`` (batch, seq) and the chosen positions (batch, seq),
        drawn from ``generator`` (None: the global one)."""
        chosen = self.maskable(tokens) & (torch.rand(tokens.shape, generator=generator) < self.prob)
        u = torch.rand(tokens.shape, generator=generator)
        replacements = self.random_ids[torch.randint(len(self.random_ids), tokens.shape, generator=generator)]
        masked = chosen & (u < 1.0 - self.random - self.keep)
        randomised = chosen & ~masked & (u < 1.0 - self.keep)
        inputs = torch.where(masked, torch.full_like(tokens, self.mask_id), tokens)
        return torch.where(randomised, replacements, inputs), chosen


def masked_lm_logits(
    model: nn.Module, inputs: Tensor, chosen: Tensor, pad_id: int, vocab_size: int | None = None
) -> Tensor:
    """Logits (n, vocab) of the n ``chosen`` positions of ``inputs`` (batch, seq): the head runs
    there only. With ``vocab_size`` (the tokenizer's), the rows that pad the embedding to a
    multiple of 64 are left out of the softmax."""
    logits = model(inputs, attention_mask=inputs != pad_id, predict=chosen)
    return logits if vocab_size is None else logits[..., :vocab_size]


@dataclass
class MaskedBatch:
    """Windows (batch, seq) with a fixed corruption: the original ``tokens``, the ``inputs`` the
    model reads and the ``chosen`` positions it is scored on."""

    tokens: Tensor
    inputs: Tensor
    chosen: Tensor


def masked_batches(
    windows: Sequence[Sequence[int]], masker: Masker, pad_id: int, batch_tokens: int, seed: int
) -> list[MaskedBatch]:
    """``windows`` in padded batches of at most ``batch_tokens`` tokens, corrupted once by a
    generator seeded with ``seed`` (the global generator is left alone)."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for indices in token_buckets([len(w) for w in windows], batch_tokens, seed):
        tokens = pad([windows[i] for i in indices], pad_id)
        inputs, chosen = masker(tokens, generator)
        batches.append(MaskedBatch(tokens, inputs, chosen))
    return batches


@torch.no_grad()
def masked_metrics(
    model: nn.Module, batches: Sequence[MaskedBatch], pad_id: int, vocab_size: int | None = None
) -> dict[str, float]:
    """The masked-token loss (mean nats per chosen token), its perplexity and the masked-token
    accuracy (the most likely token is the original one) over ``batches`` (moved to the model's
    device)."""
    total, correct, count = 0.0, 0, 0
    for batch in (on_model_device(model, b) for b in batches):
        logits = masked_lm_logits(model, batch.inputs, batch.chosen, pad_id, vocab_size).float()
        targets = batch.tokens[batch.chosen]
        total += float(F.cross_entropy(logits, targets, reduction="sum"))
        correct += int((logits.argmax(dim=-1) == targets).sum())
        count += len(targets)
    if count == 0:
        raise DataError("no token was chosen for prediction: the text is too short to score")
    loss = total / count
    return {"valid_loss": loss, "perplexity": math.exp(min(loss, 50.0)), "masked_accuracy": correct / count}


class MaskedLanguageModel:
    """A BERT with its MLM head and tokenizer: ``MaskedLanguageModel.load(run_dir).fill_mask(text)``."""

    def __init__(self, model: MaskedLM, tokenizer: WordPieceTokenizer, data: TextData | None = None) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.data = data or TextData()

    @classmethod
    def load(cls, run_dir: str | Path, device: str | torch.device = "auto") -> MaskedLanguageModel:
        """The model of an ``mlm`` run (trained here, or imported from a ``BertForMaskedLM``) on
        ``device`` (auto, cpu, cuda, cuda:N, mps; the weights read on the CPU, then moved); an
        ``encoder`` run has no MLM head and is refused."""
        where = resolve_device(device)
        run, tokenizer = read_bert_run(Path(run_dir), {TASK: TextData}, "fill-mask (the masked-LM head)")
        model = RunDir(run_dir).load_weights(MaskedLM(run.model, nsp=run.data.nsp)).to(where)
        return cls(model.eval(), tokenizer, run.data)

    def fill_mask(self, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """The ``top_k`` most likely pieces, with their probabilities, for each literal "[MASK]"
        of ``text`` (in order). The softmax leaves out the special tokens: they are never the
        word that was masked."""
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        parts = text.split(WP_MASK)
        if len(parts) == 1:
            raise DataError(f"the text has no {WP_MASK}: write {WP_MASK} where a word should be predicted")
        tok = self.tokenizer
        ids = [tok.cls_id]
        for i, piece_ids in enumerate(tok.encode_pieces_batch(parts)):
            if i:
                ids.append(tok.mask_id)
            ids.extend(piece_ids)
        ids.append(tok.sep_id)
        if len(ids) > self.model.config.max_len:
            raise DataError(
                f"the text is {len(ids)} tokens long with [CLS] and [SEP], more than the model's "
                f"max_len of {self.model.config.max_len}"
            )
        device = model_device(self.model)
        tokens = torch.tensor([ids], device=device)
        self.model.eval()
        with torch.no_grad():
            logits = masked_lm_logits(self.model, tokens, tokens == tok.mask_id, tok.pad_id, tok.vocab_size)
        special = [tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id]
        logits = logits.float().index_fill(-1, torch.tensor(special, device=device), -math.inf)
        probs, best = logits.softmax(dim=-1).topk(min(top_k, tok.vocab_size - len(special)), dim=-1)
        return [
            [(str(tok.tokenizer.id_to_token(i)), p) for i, p in zip(row_ids, row_probs, strict=True)]
            for row_ids, row_probs in zip(best.tolist(), probs.tolist(), strict=True)
        ]

    def evaluate(self, documents: Sequence[str], batch_tokens: int = 4096, seed: int = 0) -> dict[str, float]:
        """Masked-token loss, perplexity and accuracy on ``documents``, cut into windows and
        corrupted by the run's recipe with a generator seeded by ``seed``; for a model with the
        next-sentence head, on the sentence pairs of ``documents`` drawn with ``seed``, with the
        next-sentence loss and accuracy too (:func:`vaswani.pipelines.nsp.pretraining_metrics`)."""
        masker = Masker.of(self.tokenizer, self.data)
        if self.model.nsp is not None:
            return evaluate_pairs(self.model, self.tokenizer, masker, documents, batch_tokens, seed)
        windows = text_windows(self.tokenizer, documents, self.model.config.max_len)
        batches = masked_batches(windows, masker, self.tokenizer.pad_id, batch_tokens, seed)
        self.model.eval()
        return masked_metrics(self.model, batches, self.tokenizer.pad_id, self.tokenizer.vocab_size)


def filled(text: str, candidates: Sequence[Sequence[tuple[str, float]]]) -> str:
    """``text`` with each [MASK] replaced by its most likely piece (a "##" piece joins the word
    before it)."""
    parts = text.split(WP_MASK)
    out = parts[0]
    for part, choices in zip(parts[1:], candidates, strict=True):
        piece = choices[0][0]
        out = out.rstrip() + piece[2:] if piece.startswith("##") else out + piece
        out += part
    return out


def fill_mask_lines(text: str, candidates: Sequence[Sequence[tuple[str, float]]]) -> list[str]:
    """The candidates of each [MASK], one line each, and the text filled with the best ones."""
    lines = [text]
    for number, choices in enumerate(candidates, start=1):
        lines.append(f"  [MASK] {number}: " + ", ".join(f"{piece} {prob:.3f}" for piece, prob in choices))
    lines.append(f"  → {filled(text, candidates)}")
    return lines
