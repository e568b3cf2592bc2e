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

from pathlib import Path
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import RunConfig
from vaswani.errors import ConfigError
from vaswani.models.gpt import GPT
from vaswani.models.gpt_classifier import GPTClassifier
from vaswani.pipelines.bert import TextBatch
from vaswani.pipelines.lm import TASK as LM_TASK
from vaswani.pipelines.lm import model_of as lm_model_of
from vaswani.pipelines.lm import read_lm_run
from vaswani.rundir import RunDir
from vaswani.tokenizer import LMTokenizer


def pretrained_gpt(init: Path) -> tuple[RunConfig, GPT, LMTokenizer]:
    """The config, GPT and tokenizer of the lm run ``init``."""
    run, tokenizer = read_lm_run(init, "--init")
    gpt = lm_model_of(run)
    RunDir(init).load_weights(gpt)
    return run, gpt, tokenizer


def with_gpt(model: GPTClassifier, pretrained: GPT | None) -> GPTClassifier:
    """``model`` with the ``pretrained`` GPT's weights (all of them, the LM head too) copied in."""
    if pretrained is not None:
        model.gpt.load_state_dict(pretrained.state_dict())
    return model


def gpt_classifier_loss(model: nn.Module, batch: TextBatch, lm_weight: float, vocab_size: int) -> Tensor:
    """Σ_i [CE(y_i | x_i) + λ · (1 / (n_i − 1)) Σ_t CE(x_i,t+1 | x_i,≤t)] over the batch's rows
    (``lm_weight`` λ; n_i real tokens in row i; the softmax over the tokenizer's ``vocab_size``
    real tokens, as :func:`vaswani.pipelines.lm_text.next_token_loss`'s). With λ = 0 the language-modelling
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
