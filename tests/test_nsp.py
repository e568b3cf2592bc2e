"""Next-sentence prediction (``train mlm --nsp``): documents and sentences, the pairs (half IsNext,
NotNext from another document, drawn again alike), the rows and their segment ids, the summed loss
and its gradient at the pooler, a toy corpus where NSP is learnt, evaluation, exact resume and a
classifier fine-tuned on sentence pairs from an NSP run (bad input: test_bad_inputs.py; Hugging
Face parity: test_interop_bert_nsp.py)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from tests.helpers import assert_resumed_like_whole, record_initial_state, write
from vaswani.cli import main
from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.data.config import TextData
from vaswani.errors import DataError, TrainingInterrupted
from vaswani.models.bert import IS_NEXT, NOT_NEXT, MaskedLM
from vaswani.pipelines.bert import encode_texts, text_batch
from vaswani.pipelines.mlm import MaskedLanguageModel, Masker
from vaswani.pipelines.nsp import documents_of, draw_pairs, pair_row, tokenized_documents
from vaswani.tasks import lifecycle
from vaswani.tasks.mlm import NSPTask, train_mlm
from vaswani.tokenizer import WordPieceTokenizer

WORDS = ["one", "two", "three", "four", "red", "green", "blue", "black"]


def write_documents(path: Path, n_documents: int = 64, sentences: int = 6) -> Path:
    """Documents of one word each (document j: ``WORDS[j % 8]``, four times a sentence), one sentence
    a line, a blank line between documents: B follows A exactly when its word is A's, so that NSP
    is learnable (up to the NotNext sentences drawn from another document of the same word)."""
    blocks = [
        "\n".join(" ".join([WORDS[j % len(WORDS)]] * 4) for _ in range(sentences)) for j in range(n_documents)
    ]
    return write(path, "\n\n".join(blocks) + "\n")


def nsp_args(text: Path, out: Path, *extra: str) -> list[str]:
    """``vaswani train mlm --nsp`` of a one-layer BERT on ``text``."""
    return [
        "train", "mlm", "--nsp", "--text", str(text), "--out", str(out), "--vocab-size", "100",
        "--d-model", "32", "--heads", "2", "--d-ff", "64", "--layers", "1", "--max-len", "24",
        "--batch-tokens", "384", "--max-steps", "300", "--lr", "1e-2", "--warmup", "10",
        "--dropout", "0", "--eval-every", "1000", "--quiet", "--no-bf16", *extra,
    ]  # fmt: skip


def fake_documents(n_documents: int, sentences: int) -> list[list[list[int]]]:
    """Documents whose sentence i of document d is the single piece ``1000 d + i``."""
    return [[[1000 * d + i] for i in range(sentences)] for d in range(n_documents)]


def test_documents_are_blank_line_separated_blocks_of_sentence_lines():
    texts = ["first a\n  first b \n\n\n second a\n \t\nthird a\n", "fourth a"]
    assert documents_of(texts) == [["first a", "first b"], ["second a"], ["third a"], ["fourth a"]]


def test_pairs_are_half_next_and_not_next_from_another_document():
    documents = fake_documents(50, 41)
    pairs = draw_pairs(documents, seed=0)
    assert len(pairs) == 50 * 40
    labels = torch.tensor([label for _, _, label in pairs])
    assert abs(float((labels == IS_NEXT).float().mean()) - 0.5) < 0.03
    others = set()
    for (a,), (b,), label in pairs:
        if label == IS_NEXT:
            assert b == a + 1  # the next sentence of A's document
        else:
            assert label == NOT_NEXT and b // 1000 != a // 1000  # a sentence of another document
            others.add(b // 1000)
    assert len(others) == 50  # drawn from every document
    assert draw_pairs(documents, seed=0) == pairs  # a resumed run draws the same pairs
    assert draw_pairs(documents, seed=1) != pairs


def test_a_split_of_one_document_draws_not_next_from_the_other_split():
    pairs = draw_pairs(fake_documents(1, 30), seed=0, spare=[[[7777], [7778]]])
    assert {b for _, (b,), label in pairs if label == NOT_NEXT} <= {7777, 7778}
    with pytest.raises(DataError, match="single document"):
        draw_pairs(fake_documents(1, 30), seed=0)
    with pytest.raises(DataError, match="no document has two sentences"):
        draw_pairs(fake_documents(5, 1), seed=0)


def test_a_pair_row_is_cls_a_sep_b_sep_with_segments_0_then_1():
    ids, segments = pair_row([11, 12, 13], [21, 22], cls_id=2, sep_id=3, max_len=20)
    assert ids == [2, 11, 12, 13, 3, 21, 22, 3]
    assert segments == [0, 0, 0, 0, 0, 1, 1, 1]
    ids, segments = pair_row(list(range(10, 20)), [21, 22, 23], cls_id=2, sep_id=3, max_len=12)
    assert ids == [2, 10, 11, 12, 13, 14, 15, 3, 21, 22, 23, 3]  # the longer one cut
    assert segments == [0] * 8 + [1] * 4
    ids, _ = pair_row(list(range(10, 20)), [21, 22, 23, 24, 25, 26], cls_id=2, sep_id=3, max_len=12)
    assert ids == [2, 10, 11, 12, 13, 14, 3, 21, 22, 23, 24, 3]  # both cut: the shorter keeps half


def test_rows_are_those_of_the_tokenizers_pair_encoding():
    """The pretraining rows are what a classifier reads for the same pair (``encode_segments``,
    Hugging Face's encoding of a pair), cut to max_len alike."""
    texts = ["the cat sat on the mat", "a dog ran in the park today", "birds sing"]
    tokenizer = WordPieceTokenizer.train(texts * 5, vocab_size=60, min_frequency=1, max_len=12)
    pieces = tokenizer.encode_pieces_batch(texts)
    for a, b in [(0, 1), (1, 2), (2, 0), (1, 1)]:
        row = pair_row(pieces[a], pieces[b], tokenizer.cls_id, tokenizer.sep_id, 12)
        assert row == tokenizer.encode_segments(texts[a], texts[b])


def _tiny_task(tmp_path: Path) -> tuple[NSPTask, MaskedLM, WordPieceTokenizer]:
    text = write_documents(tmp_path / "docs.txt", n_documents=8).read_text()
    tokenizer = WordPieceTokenizer.train([text], vocab_size=60, min_frequency=1, max_len=24)
    masker = Masker.of(tokenizer, TextData())
    task = NSPTask(tokenizer, masker, [text], [text], 24, 200, 0, 50)
    cfg = ModelConfig.preset("tiny", arch="encoder_only", vocab_size=64, max_len=24, position="learned")
    return task, MaskedLM(cfg, nsp=True), tokenizer


def test_the_loss_sums_the_two_means_and_reaches_the_pooler(tmp_path):
    task, model, tokenizer = _tiny_task(tmp_path)
    batch = task.train_batches()[0]
    torch.manual_seed(5)
    loss, n = task.loss(model, batch)
    torch.manual_seed(5)
    inputs, chosen = task.masker(batch.tokens, None)
    mlm, nsp = model(inputs, batch.segments, inputs != tokenizer.pad_id, predict=chosen, next_sentence=True)
    assert n == int(chosen.sum()) > 0
    mlm_mean = F.cross_entropy(mlm[:, : tokenizer.vocab_size], batch.tokens[chosen])
    torch.testing.assert_close(loss / n, mlm_mean + F.cross_entropy(nsp, batch.labels))
    loss.backward()
    for name in ("bert.pooler.dense.weight", "nsp.linear.weight"):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and grad.abs().sum() > 0, name
    assert set(batch.segments.unique().tolist()) == {0, 1}
    assert sorted(set(batch.labels.tolist())) == [IS_NEXT, NOT_NEXT]


def test_pairs_and_validation_are_drawn_alike_each_time(tmp_path):
    a, _, _ = _tiny_task(tmp_path)
    b, _, _ = _tiny_task(tmp_path)
    for x, y in zip([*a.batches, *a.valid], [*b.batches, *b.valid], strict=True):
        assert torch.equal(x.tokens, y.tokens) and torch.equal(x.labels, y.labels)
        assert torch.equal(x.segments, y.segments)
    assert all(torch.equal(x.inputs, y.inputs) for x, y in zip(a.valid, b.valid, strict=True))


def test_tokenized_documents_keep_the_blocks(tmp_path):
    tokenizer = WordPieceTokenizer.train(["one two", "three"], vocab_size=40, min_frequency=1)
    assert tokenized_documents(tokenizer, ["one two\none\n\nthree"]) == [
        [tokenizer.encode_pieces_batch(["one two"])[0], tokenizer.encode_pieces_batch(["one"])[0]],
        [tokenizer.encode_pieces_batch(["three"])[0]],
    ]


@pytest.fixture(scope="module")
def nsp_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("nsp")
    assert main(nsp_args(write_documents(folder / "docs.txt"), folder / "run")) == 0
    return folder / "run"


def test_a_tiny_model_learns_next_sentence_prediction(nsp_run):
    metrics = json.loads((nsp_run / "metrics.json").read_text())
    assert metrics["nsp_accuracy"] > 0.8 and metrics["masked_accuracy"] > 0.8  # chance: 0.5, 1/8
    assert metrics["valid_loss"] == pytest.approx(metrics["masked_loss"] + metrics["nsp_loss"])
    config = json.loads((nsp_run / "config.json").read_text())
    assert config["data"]["nsp"] and config["model"]["pooler"]
    assert {"nsp.linear.weight", "bert.pooler.dense.weight"} <= load_file(
        nsp_run / "model.safetensors"
    ).keys()


def test_evaluate_reports_the_masked_and_next_sentence_accuracy(nsp_run, tmp_path, capsys):
    text = write_documents(tmp_path / "held_out.txt", n_documents=20)
    capsys.readouterr()
    assert main(["evaluate", str(nsp_run), "--text", str(text)]) == 0
    printed = capsys.readouterr().out
    direct = MaskedLanguageModel.load(nsp_run).evaluate([text.read_text()])
    assert f"masked-token loss {direct['masked_loss']:.4f}" in printed
    assert f"next-sentence loss {direct['nsp_loss']:.4f}  accuracy {direct['nsp_accuracy']:.1%}" in printed
    assert direct["nsp_accuracy"] > 0.8
    one = write(tmp_path / "one.txt", "red red\nred red\n")
    assert main(["evaluate", str(nsp_run), "--text", str(one)]) == 2
    err = capsys.readouterr().err
    assert "single document" in err and len(err.strip().splitlines()) == 1


def test_a_pair_classifier_starts_from_the_nsp_runs_pooler(nsp_run, tmp_path, monkeypatch):
    """Fine-tuning on sentence pairs: the encoder and the pooler that NSP trained are the classifier's
    before its first step, and a pair reaches it as the pretraining rows did (segments 0, then 1)."""
    rows = [(WORDS[i % 8], WORDS[(i * 3) % 8]) for i in range(40)]
    lines = "".join(f"{a} {a}\t{b} {b}\t{'same' if a == b else 'other'}\n" for a, b in rows)
    train = write(tmp_path / "train.tsv", "first\tsecond\tlabel\nred red\tred red\tsame\n" + lines)
    seen = record_initial_state(monkeypatch)
    args = [
        "train", "classify", "--train", str(train), "--dev", str(train), "--init", str(nsp_run),
        "--text-column", "first", "--text-column", "second", "--out", str(tmp_path / "cls"),
        "--max-steps", "2", "--quiet", "--no-bf16",
    ]  # fmt: skip
    assert main(args) == 0
    pretrained = load_file(nsp_run / "model.safetensors")
    encoder = {k: v for k, v in pretrained.items() if k.startswith("bert.")}
    assert "bert.pooler.dense.weight" in encoder
    for key, tensor in encoder.items():
        assert torch.equal(seen[key], tensor), key
    assert not any(k.startswith("nsp.") for k in seen)  # the classifier has its own head
    tokenizer = WordPieceTokenizer.load(nsp_run / "tokenizer.json")
    batch = text_batch(encode_texts(tokenizer, [("red red", "blue blue")]), tokenizer.pad_id)
    a, b = tokenizer.encode_pieces_batch(["red red", "blue blue"])
    ids, segments = pair_row(a, b, tokenizer.cls_id, tokenizer.sep_id, 24)
    assert batch.tokens[0].tolist() == ids and batch.segments[0].tolist() == segments
    assert segments == [0] * (len(a) + 2) + [1] * (len(b) + 1)


def _run(text: Path, max_steps: int) -> RunConfig:
    model = ModelConfig.preset(
        "tiny", arch="encoder_only", max_len=24, position="learned", dropout=0.1, pooler=True
    )
    train = TrainConfig(
        batch_tokens=192, max_steps=max_steps, lr=3e-3, warmup_steps=2, eval_every=1000, checkpoint_every=4,
        eval_sentences=8, seed=3, optimizer="adamw", schedule="cosine", label_smoothing=0.0,
    )  # fmt: skip
    return RunConfig(
        "mlm", model, train, TextData(source="text", text=(str(text),), vocab_size=100, nsp=True)
    )


def test_an_interrupted_nsp_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    """SIGINT during step 5 of 8: the resumed run (the same pairs, the masks of the saved generator)
    ends bit-identical to the uninterrupted one."""
    text = write_documents(tmp_path / "docs.txt", n_documents=12)
    whole = tmp_path / "whole"
    train_mlm(_run(text, 8), whole, quiet=True)
    calls = 0
    original = NSPTask.loss

    def interrupted_loss(self, model, batch):
        nonlocal calls
        calls += 1
        if calls == 5:
            os.kill(os.getpid(), signal.SIGINT)
        return original(self, model, batch)

    monkeypatch.setattr(NSPTask, "loss", interrupted_loss)
    parts = tmp_path / "parts"
    with pytest.raises(TrainingInterrupted):
        train_mlm(_run(text, 8), parts, quiet=True)
    monkeypatch.undo()
    first_leg = load_file(parts / "model.safetensors")
    lifecycle.resume(parts, quiet=True)
    assert_resumed_like_whole(whole, parts, first_leg, 8)
