"""Masked language modelling: BERT's masking recipe, the loss at the chosen positions only, text
windows, exact resume, a tiny model that learns, ``fill-mask``, ``evaluate --text`` and the export of
a run (bad input: test_bad_inputs.py)."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from tests.helpers import COUNTING, assert_resumed_like_whole, tiny_mlm_run, write_repeated_text
from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.errors import TrainingInterrupted
from vaswani.models.bert import MaskedLM
from vaswani.pipelines.mlm import MaskedLanguageModel, Masker, filled, text_windows
from vaswani.tasks import lifecycle
from vaswani.tasks.mlm import MLMTask, masked_lm_loss, train_mlm
from vaswani.tokenizer import WordPieceTokenizer

# ---------------------------------------------------------------------------------------------
# The masking recipe


PAD, CLS, SEP, MASK, UNK = 0, 2, 3, 4, 1
VOCAB = 50


def _masker(prob: float = 0.15, random: float = 0.1, keep: float = 0.1) -> Masker:
    special = torch.tensor([PAD, CLS, SEP, MASK])
    return Masker(MASK, special, torch.arange(5, VOCAB), prob, random, keep)


def _windows(rows: int = 400, width: int = 128, seed: int = 0) -> torch.Tensor:
    """[CLS] x [SEP] rows of random lengths, padded."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, VOCAB, (rows, width), generator=g)
    tokens[:, 0] = CLS
    lengths = torch.randint(10, width + 1, (rows,), generator=g)
    for i, n in enumerate(lengths.tolist()):
        tokens[i, n - 1] = SEP
        tokens[i, n:] = PAD
    tokens[::7, 5] = UNK  # an unknown word may be chosen like any other
    return tokens


def test_masking_follows_berts_proportions():
    tokens = _windows(rows=4000)
    inputs, chosen = _masker()(tokens, torch.Generator().manual_seed(1))
    real = ~torch.isin(tokens, torch.tensor([PAD, CLS, SEP]))
    assert not chosen[~real].any()  # [CLS], [SEP] and padding are never chosen
    assert torch.equal(inputs[~chosen], tokens[~chosen])  # nothing else changes
    n = int(chosen.sum())
    assert n > 35_000
    assert abs(n / int(real.sum()) - 0.15) < 0.005
    masked = inputs[chosen] == MASK
    kept = inputs[chosen] == tokens[chosen]
    randomised = ~masked & ~kept
    # A random replacement draws the original token 1 time in 45: kept ≈ 0.1 + 0.1 / 45.
    assert abs(float(masked.float().mean()) - 0.8) < 0.01
    assert abs(float(randomised.float().mean()) - 0.1 * 44 / 45) < 0.01
    assert abs(float(kept.float().mean()) - (0.1 + 0.1 / 45)) < 0.01
    replacements = inputs[chosen][randomised]
    assert not torch.isin(replacements, torch.tensor([PAD, UNK, CLS, SEP, MASK])).any()
    assert len(replacements.unique()) == VOCAB - 5  # every ordinary piece can be drawn
    assert chosen[tokens == UNK].any()


@pytest.mark.parametrize(("random", "keep"), [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0)])
def test_masking_extremes(random, keep):
    tokens = _windows(rows=50)
    inputs, chosen = _masker(0.5, random, keep)(tokens, torch.Generator().manual_seed(0))
    if keep == 1.0:
        assert torch.equal(inputs, tokens)
    elif random == 1.0:
        assert not (inputs == MASK).any() and (inputs[chosen] != tokens[chosen]).float().mean() > 0.9
    else:
        assert (inputs[chosen] == MASK).all()


def test_masks_are_fresh_each_draw_and_repeat_with_the_seed():
    tokens = _windows(rows=20)
    masker = _masker()
    first = masker(tokens, torch.Generator().manual_seed(3))
    again = masker(tokens, torch.Generator().manual_seed(3))
    generator = torch.Generator().manual_seed(3)
    masker(tokens, generator)
    second = masker(tokens, generator)  # the same generator, drawn on: a new mask
    assert torch.equal(first[1], again[1]) and torch.equal(first[0], again[0])
    assert not torch.equal(first[1], second[1])
    torch.manual_seed(5)
    global_draw = masker(tokens)  # no generator: the global one, which the trainer seeds and saves
    torch.manual_seed(5)
    assert torch.equal(masker(tokens)[1], global_draw[1])


class _FixedLogits(nn.Module):
    """MaskedLM's interface over given full logits (batch, seq, vocab): the rows at ``predict``, or
    with ``targets`` their summed cross-entropy."""

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, tokens, segments=None, attention_mask=None, predict=None, targets=None, n_classes=None):
        rows = self.logits if predict is None else self.logits[predict]
        return rows if targets is None else F.cross_entropy(rows[..., :n_classes], targets, reduction="sum")


def test_loss_is_taken_at_the_chosen_positions_only():
    tokens = _windows(rows=6, width=16)
    inputs, chosen = _masker(0.3)(tokens, torch.Generator().manual_seed(0))
    logits = torch.randn(6, 16, VOCAB, generator=torch.Generator().manual_seed(1))
    loss, count = masked_lm_loss(_FixedLogits(logits), tokens, inputs, chosen, PAD)
    assert count == int(chosen.sum()) > 0
    expected = F.cross_entropy(logits[chosen], tokens[chosen], reduction="sum")
    torch.testing.assert_close(loss, expected)
    elsewhere = logits.clone()
    elsewhere[~chosen] = torch.randn_like(elsewhere[~chosen]) * 10
    assert float(masked_lm_loss(_FixedLogits(elsewhere), tokens, inputs, chosen, PAD)[0]) == float(loss)
    one = logits.clone()
    one[chosen.nonzero()[0].tolist()] += torch.randn(VOCAB) * 10
    assert float(masked_lm_loss(_FixedLogits(one), tokens, inputs, chosen, PAD)[0]) != float(loss)


def test_loss_of_a_real_model_runs_the_head_at_the_chosen_positions():
    torch.manual_seed(0)
    cfg = ModelConfig.preset(
        "bert-base", src_vocab_size=64, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, max_len=128,
        dropout=0.0, attn_dropout=0.0,
    )  # fmt: skip
    model = MaskedLM(cfg).eval()
    tokens = _windows(rows=3, width=20)
    inputs, chosen = _masker(0.3)(tokens, torch.Generator().manual_seed(0))
    loss, count = masked_lm_loss(model, tokens, inputs, chosen, PAD, vocab_size=VOCAB)
    full = model(inputs, attention_mask=inputs != PAD)[..., :VOCAB]
    expected = F.cross_entropy(full[chosen], tokens[chosen], reduction="sum")
    torch.testing.assert_close(loss, expected, atol=1e-4, rtol=1e-5)
    assert count == int(chosen.sum())


def test_text_windows_cover_each_document_in_order():
    tokenizer = WordPieceTokenizer.train([COUNTING] * 5, vocab_size=200, min_frequency=1, max_len=8)
    docs = [" ".join([COUNTING] * 3), "one two", "three"]
    windows = text_windows(tokenizer, docs, 8)
    assert all(len(w) <= 8 and w[0] == tokenizer.cls_id and w[-1] == tokenizer.sep_id for w in windows)
    pieces = tokenizer.encode_pieces_batch(docs)
    assert len(pieces[0]) == 36  # not truncated to max_len
    assert tokenizer.max_len == 8 and len(tokenizer.encode(docs[0])) == 8  # truncation is back on
    assert [t for w in windows for t in w[1:-1]] == [t for doc in pieces for t in doc]
    assert [len(w) - 2 for w in windows] == [6] * 6 + [2, 1]  # a window never spans two documents


def test_filled_joins_continuation_pieces():
    assert filled("The [MASK] statement [MASK].", [[("for", 0.9)], [("##s", 0.5)]]) == "The for statements."


# ---------------------------------------------------------------------------------------------
# Training, resume and the commands


def _run(text: Path, max_steps: int) -> RunConfig:
    model = ModelConfig.preset(
        "bert-base", d_model=32, n_heads=2, d_ff=64, n_encoder_layers=1, max_len=24, dropout=0.1,
        pooler=False,
    )  # fmt: skip
    train = TrainConfig(
        batch_tokens=192, max_steps=max_steps, lr=3e-3, warmup_steps=4, eval_every=1000, checkpoint_every=5,
        eval_sentences=8, seed=3, optimizer="adamw", schedule="cosine", label_smoothing=0.0,
    )  # fmt: skip
    return RunConfig("mlm", model, train, TextData(source="text", text=(str(text),), vocab_size=100))


def test_interrupted_then_resumed_run_ends_with_the_same_weights(tmp_path, monkeypatch):
    """SIGINT during step 10 of 15 (dropout on, masks drawn afresh each step, cosine decay): the
    resumed run ends bit-identical to the uninterrupted one."""
    text = write_repeated_text(tmp_path / "text.txt")
    whole = tmp_path / "whole"
    train_mlm(_run(text, 15), whole, quiet=True)
    calls = 0
    original = MLMTask.loss

    def interrupted_loss(self, model, batch):
        nonlocal calls
        calls += 1
        if calls == 10:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, model, batch)

    monkeypatch.setattr(MLMTask, "loss", interrupted_loss)
    parts = tmp_path / "parts"
    with pytest.raises(TrainingInterrupted):
        train_mlm(_run(text, 15), parts, quiet=True)
    monkeypatch.undo()
    first_leg = load_file(parts / "model.safetensors")
    assert (
        json.loads((parts / "checkpoints" / "step_00000010" / "trainer_state.json").read_text())["step"] == 10
    )
    lifecycle.resume(parts, quiet=True)
    assert_resumed_like_whole(whole, parts, first_leg, 15)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return tiny_mlm_run(tmp_path_factory.mktemp("mlm"))


def test_a_tiny_model_learns_the_masked_words(run):
    metrics = json.loads((run / "metrics.json").read_text())
    for key in ("valid_loss", "perplexity", "masked_accuracy", "train_seconds", "steps", "tokens_per_second"):
        assert key in metrics, key
    assert metrics["steps"] == 300
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["valid_loss"]))
    vocab = WordPieceTokenizer.load(run / "tokenizer.json").vocab_size
    assert vocab > 20 and metrics["masked_accuracy"] > 0.8  # chance: 1 / vocab
    config = json.loads((run / "config.json").read_text())
    assert config["task"] == "mlm" and config["model"]["arch"] == "encoder_only"
    assert config["model"]["vocab_size"] % 64 == 0 and config["model"]["vocab_size"] >= vocab
    assert {"config.json", "model.safetensors", "tokenizer.json", "metrics.json", "train_log.csv"} <= {
        p.name for p in run.iterdir()
    }


def test_fill_mask_prints_the_candidates_of_each_mask(run, capsys):
    capsys.readouterr()
    text = "five five [MASK] five five nine nine nine [MASK] nine"
    assert main(["fill-mask", str(run), text, "--top-k", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == text
    assert lines[1].startswith("  [MASK] 1: five 0.") and lines[2].startswith("  [MASK] 2: nine 0.")
    assert all(len(line.split(": ", 1)[1].split(", ")) == 3 for line in lines[1:3])
    assert lines[3] == "  → five five five five five nine nine nine nine nine"
    candidates = MaskedLanguageModel.load(run).fill_mask("two two [MASK] two", top_k=4)
    probs = [p for _, p in candidates[0]]
    assert len(candidates) == 1 and probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0 + 1e-6
    assert not {"[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"} & {piece for piece, _ in candidates[0]}


def test_evaluate_reports_masked_loss_and_accuracy(run, capsys, tmp_path):
    text = write_repeated_text(tmp_path / "held_out.txt", lines=24)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--text", str(text)]) == 0
    printed = capsys.readouterr().out
    assert "masked-token loss" in printed and "perplexity" in printed and "accuracy" in printed
    direct = MaskedLanguageModel.load(run).evaluate([text.read_text().rstrip("\n")])
    assert f"{direct['valid_loss']:.4f}" in printed
    assert direct["masked_accuracy"] > 0.8


def test_an_mlm_run_exports_as_bert_for_masked_lm(run, tmp_path):
    transformers = pytest.importorskip("transformers")
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 0
    hf = transformers.BertForMaskedLM.from_pretrained(tmp_path / "hf").eval()
    ours = MaskedLanguageModel.load(run)
    tokens = torch.tensor([ours.tokenizer.encode("one two three four")])
    with torch.no_grad():
        expected = ours.model(tokens)
        got = hf(input_ids=tokens).logits
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
