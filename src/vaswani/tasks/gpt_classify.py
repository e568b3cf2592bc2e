"""A GPT fine-tuned as a text classifier (``vaswani train classify --init LM_RUN``), as GPT-1 was
(Radford et al. 2018, section 3.3).

The classifier starts from an ``lm`` run (trained here, or imported from GPT-2 or Llama): its
model config (but the dropout), weights and tokenizer. A text is read as its tokens alone; a
sentence pair as ``A <sep> B``, joined by the tokenizer's end-of-text token (GPT-2's
``<|endoftext|>``, a Llama's ``</s>``) as GPT-1 joined the parts of an entailment or similarity
input by a delimiter token (its ``$``), the longer part cut first to fit ``max_len``. The rows are
right-padded and the classifier reads the last real token's final state, or the mean of the
states (:class:`~vaswani.models.gpt_classifier.GPTClassifier`).

Fine-tuning keeps language modelling as an auxiliary objective (GPT-1's L_3 = L_2 + λ · L_1):
each example's loss is the cross-entropy of its label plus ``lm_weight`` (λ, 0.5 in the paper)
times the mean next-token cross-entropy over its real tokens (the mean per example, as OpenAI's
code computes it); ``lm_weight`` 0 leaves out the language-modelling logits altogether.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig
from vaswani.data.batching import pad
from vaswani.errors import ConfigError
from vaswani.models.gpt import GPT
from vaswani.models.gpt_classifier import GPTClassifier
from vaswani.rundir import RunDir
from vaswani.tasks.bert import Row, TextBatch, TextReader, bert_reader
from vaswani.tasks.lm import TASK as LM_TASK
from vaswani.tasks.lm import check_vocab, read_lm_run
from vaswani.tasks.lm import model_of as lm_model_of
from vaswani.tasks.lm_text import run_tokenizer
from vaswani.tokenizer import LMTokenizer, WordPieceTokenizer

TOKENIZER = "tokenizer.json"


def pretrained_gpt(init: Path) -> tuple[RunConfig, GPT, LMTokenizer]:
    """The config, GPT and tokenizer of the lm run ``init``."""
    run, tokenizer = read_lm_run(init, "--init")
    gpt = lm_model_of(run)
    RunDir(init).load_weights(gpt)
    return run, gpt, tokenizer


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


def with_gpt(model: GPTClassifier, pretrained: GPT | None) -> GPTClassifier:
    """``model`` with the ``pretrained`` GPT's weights (all of them, the LM head too) copied in."""
    if pretrained is not None:
        model.gpt.load_state_dict(pretrained.state_dict())
    return model


def gpt_classifier_loss(model: nn.Module, batch: TextBatch, lm_weight: float, vocab_size: int) -> Tensor:
    """Σ_i [CE(y_i | x_i) + λ · (1 / (n_i − 1)) Σ_t CE(x_i,t+1 | x_i,≤t)] over the batch's rows
    (``lm_weight`` λ; n_i real tokens in row i; the softmax over the tokenizer's ``vocab_size``
    real tokens, as :func:`vaswani.tasks.lm_text.next_token_loss`'s). With λ = 0 the language-modelling
    logits are not computed: the loss, and its gradient, are the labels' cross-entropy alone."""
    assert batch.labels is not None
    logits, lm = model(batch.tokens, batch.mask, lm=lm_weight > 0)
    loss = F.cross_entropy(logits.float(), batch.labels, reduction="sum")
    if lm is None:
        return loss
    real = batch.mask[:, 1:]
    targets = batch.tokens[:, 1:].masked_fill(~real, -100)
    per_token = F.cross_entropy(
        lm[:, :-1, :vocab_size].float().transpose(1, 2), targets, ignore_index=-100, reduction="none"
    )  # (batch, seq - 1), 0 at the padding
    per_row = per_token.sum(dim=1) / real.sum(dim=1).clamp(min=1)
    return loss + lm_weight * per_row.sum()


def init_is_lm(init: str | Path) -> bool:
    """Whether the run ``--init`` names is an ``lm`` run (its config read: one line if it is not a
    run), which makes the classifier a GPT's."""
    return RunDir(init).read_config().task == LM_TASK


def reader_of(model: nn.Module, tokenizer: WordPieceTokenizer | LMTokenizer) -> TextReader:
    """How the classifier ``model`` reads texts: a GPT's rows (:func:`gpt_reader`) or BERT's
    ``[CLS] A [SEP]`` (:func:`~vaswani.tasks.bert.bert_reader`)."""
    if isinstance(model, GPTClassifier):
        assert isinstance(tokenizer, LMTokenizer)
        return gpt_reader(tokenizer, model.config.max_len)
    assert isinstance(tokenizer, WordPieceTokenizer)
    return bert_reader(tokenizer)


def gpt_rules(data: dict[str, Any], given: dict[str, Any]) -> None:
    """A classifier's pooling and auxiliary loss by its kind, applied to its ``data`` section in
    place (``given``: the data fields the user set): a GPT's (``--init`` an lm run) pools the last
    token unless told otherwise, and has no [CLS]; a BERT's pools no last token and has no
    language-modelling loss."""
    if data.get("init") is not None and init_is_lm(data["init"]):
        if "pool" not in given:
            data["pool"] = "last"
        elif data["pool"] == "cls":
            raise ConfigError(
                "--pool cls: a GPT classifier has no [CLS]; it pools the last token or the mean"
            )
    elif data.get("pool") == "last":
        raise ConfigError("--pool last: a GPT classifier's (--init an lm run); a BERT pools cls or mean")
    elif "lm_weight" in given:
        raise ConfigError("--lm-weight: the language-modelling loss is a GPT classifier's (--init an lm run)")
