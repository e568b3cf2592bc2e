"""A GPT after pretraining: ``train lm --init`` continues an lm run, ``train classify --init LM_RUN``
fine-tunes a GPT classifier (GPT-1's: the last real token, an auxiliary language-modelling loss),
used, evaluated and resumed as a BERT classifier is."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from tests.helpers import (
    assert_resumed_like_whole,
    record_initial_state,
    tiny_lm_args,
    tiny_lm_run,
    write_lm_text,
    write_sentiment,
)
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.models.gpt_classifier import GPTClassifier
from vaswani.pipelines.classify import TextClassifier, cut_pair, encode_gpt_texts, gpt_batch
from vaswani.pipelines.lm_text import next_token_loss
from vaswani.tasks.gpt_classify import gpt_classifier_loss
from vaswani.tokenizer import LMTokenizer

VOCAB = 40


def tiny_gpt(position: str = "learned", **changes: object) -> ModelConfig:
    return ModelConfig.preset(
        "gpt-mini", n_decoder_layers=2, d_model=32, n_heads=4, d_ff=64, max_len=24, dropout=0.0,
        position=position, tgt_vocab_size=64, **changes,
    )  # fmt: skip


def rows(lengths: list[int], seed: int = 0) -> list[tuple[list[int], ...]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randint(1, VOCAB, (n,), generator=generator).tolist(),) for n in lengths]


def gradients(model: GPTClassifier) -> dict[str, torch.Tensor]:
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return grads


def test_the_auxiliary_lm_loss_changes_the_gradient_and_weight_zero_is_the_plain_cross_entropy():
    torch.manual_seed(0)
    model = GPTClassifier(tiny_gpt(), 3)
    examples = rows([5, 2, 7, 4])
    batch = gpt_batch(examples, pad_id=0, labels=[0, 2, 1, 2])
    F.cross_entropy(model(batch.tokens, batch.mask)[0], batch.labels, reduction="sum").backward()
    plain = gradients(model)
    gpt_classifier_loss(model, batch, 0.0, VOCAB).backward()
    zero = gradients(model)
    assert zero.keys() == plain.keys()
    assert all(torch.equal(zero[k], plain[k]) for k in plain)  # exactly the plain gradient
    sum(
        next_token_loss(model.gpt, torch.tensor(r)[None], VOCAB)[0] / (len(r) - 1) for (r,) in examples
    ).backward()
    lm = gradients(model)  # GPT-1's L_1 as a reference: each row alone, its mean token loss
    gpt_classifier_loss(model, batch, 0.5, VOCAB).backward()
    both = gradients(model)
    assert any(not torch.allclose(both[k], plain[k]) for k in plain)
    for key in both:
        expected = plain.get(key, torch.zeros_like(both[key])) + 0.5 * lm.get(
            key, torch.zeros_like(both[key])
        )
        assert torch.allclose(both[key], expected, atol=1e-6), key


@pytest.mark.parametrize("pool", ["last", "mean"])
@pytest.mark.parametrize("position", ["learned", "rope", "alibi"])
def test_pooling_under_right_padding_equals_each_row_alone(pool, position):
    torch.manual_seed(1)
    model = GPTClassifier(tiny_gpt(position), 4, pool).eval()
    examples = rows([6, 1, 9, 3], seed=2)
    batch = gpt_batch(examples, pad_id=0)
    with torch.no_grad():
        together = model(batch.tokens, batch.mask)[0]
        for i, row in enumerate(examples):
            alone = gpt_batch([row], pad_id=0)
            hidden, _ = model.gpt.hidden(alone.tokens)
            pooled = hidden[0, -1] if pool == "last" else hidden[0].mean(dim=0)
            assert torch.allclose(together[i], model.head(pooled[None])[0], atol=1e-5)


def test_texts_and_pairs_are_read_with_the_end_of_text_between_the_parts():
    tokenizer = LMTokenizer.train(["the cat sat on the mat", "a dog ran"], "char", 0)
    a, b = tokenizer.encode("the cat"), tokenizer.encode("a dog")
    assert encode_gpt_texts(tokenizer, [("the cat", "a dog")], 24) == [([*a, tokenizer.eos_id, *b],)]
    assert encode_gpt_texts(tokenizer, [("the cat",), ("",)], 4) == [(a[:4],), ([tokenizer.eos_id],)]
    assert cut_pair(list(range(10)), list(range(3)), 8) == (list(range(5)), list(range(3)))
    assert cut_pair(list(range(10)), list(range(9)), 8) == (list(range(4)), list(range(4)))
    batch = gpt_batch([([5, tokenizer.eos_id, 6],), ([7],)], tokenizer.eos_id)
    assert batch.mask.tolist() == [[True, True, True], [True, False, False]]  # the separator is real


def test_lm_init_continues_the_run_from_its_weights_tokenizer_and_model(tmp_path, monkeypatch):
    first = tiny_lm_run(tmp_path)
    new_text = write_lm_text(tmp_path / "new.txt", seed=5)
    initial = record_initial_state(monkeypatch)
    args = ["train", "lm", "--init", str(first), "--text", str(new_text), "--out", str(tmp_path / "next")]
    assert main([*args, "--max-steps", "3", "--dropout", "0", "--quiet", "--no-bf16"]) == 0
    pretrained = load_file(first / "model.safetensors")
    assert set(pretrained) <= set(initial)  # the file leaves out the head tied to the embedding
    assert all(torch.equal(initial[k], pretrained[k]) for k in pretrained)  # identical at step 0
    before, after = (json.loads((d / "config.json").read_text()) for d in (first, tmp_path / "next"))
    assert {**after["model"], "dropout": before["model"]["dropout"]} == before["model"]
    assert after["data"]["init"] == str(first) and after["data"]["text"] == [str(new_text)]
    assert after["train"]["lr"] == 1e-4  # recipes/lm-init.yaml
    assert (first / "tokenizer.json").read_bytes() == (tmp_path / "next" / "tokenizer.json").read_bytes()


def classify_args(init: Path, train: Path, dev: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train", "classify", "--init", str(init), "--train", str(train), "--dev", str(dev), "--out", str(out),
        "--lr", "3e-3", "--warmup", "5", "--dropout", "0", "--quiet", "--no-bf16", "--deterministic", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def sentiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """An lm run on the sentiment sentences (unlabeled) and the labeled train and dev files."""
    folder = tmp_path_factory.mktemp("gpt_classify")
    train, dev = write_sentiment(folder, "train", 200, seed=0), write_sentiment(folder, "dev", 60, seed=1)
    text = folder / "sentences.txt"
    text.write_text("".join(line.split("\t")[0] + "\n" for line in train.read_text().splitlines()[1:]))
    assert main(tiny_lm_args(text, folder / "lm", "--max-len", "64")) == 0
    return folder / "lm", train, dev


def test_a_gpt_classifier_trains_classifies_evaluates_and_resumes_exactly(tmp_path, sentiment, capsys):
    lm, train, dev = sentiment
    out = tmp_path / "cls"
    assert main(classify_args(lm, train, dev, out, "--epochs", "20")) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["valid_accuracy"] >= 0.8  # chance is about 0.5
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["arch"] == "decoder_only" and config["data"]["pool"] == "last"
    assert config["data"]["lm_weight"] == 0.5 and config["data"]["eos_token"] == "<|endoftext|>"
    capsys.readouterr()
    assert main(["classify", str(out), "a great film", "the plot was awful"]) == 0
    labels = [line.split("\t")[0] for line in capsys.readouterr().out.splitlines()]
    assert labels == ["positive", "negative"]
    assert main(["evaluate", str(out), "--labeled", str(dev)]) == 0
    assert f"accuracy {metrics['valid_accuracy']:.1%}" in capsys.readouterr().out
    classifier = TextClassifier.load(out)
    assert isinstance(classifier.model, GPTClassifier)
    assert main(["attention", str(out), "a great film", "--out", str(tmp_path / "attention.png")]) == 0
    assert (tmp_path / "attention.png").is_file()  # its GPT's causal self-attention
    capsys.readouterr()
    assert main(["embed", str(out), "a great film"]) == 2
    assert (
        capsys.readouterr().err
        == f"vaswani: error: {out}: a GPT classify run (decoder-only); embed needs a BERT run\n"
    )
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert main(classify_args(lm, train, dev, whole, "--max-steps", "6")) == 0
    assert main(classify_args(lm, train, dev, parts, "--max-steps", "3", "--checkpoint-every", "3")) == 0
    first_leg = load_file(parts / "model.safetensors")
    assert main(["train", "classify", "--resume", str(parts), "--max-steps", "6", "--quiet"]) == 0
    assert_resumed_like_whole(whole, parts, first_leg, 6)


def test_a_gpt_classifier_of_sentence_pairs_and_mean_pooling(tmp_path, sentiment, capsys):
    lm, train, _ = sentiment
    lines = train.read_text().splitlines()[1:]
    pairs = tmp_path / "pairs.tsv"  # the label is the second sentence's
    pairs.write_text(
        "a\tb\tlabel\n" + "".join(f"{x.split(chr(9))[0]}\t{y}\n" for x, y in itertools.pairwise(lines))
    )
    out = tmp_path / "pair_cls"
    args = [
        "--text-column",
        "a",
        "--text-column",
        "b",
        "--pool",
        "mean",
        "--lm-weight",
        "0",
        "--max-steps",
        "4",
    ]
    assert main(classify_args(lm, pairs, pairs, out, *args)) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["data"]["pool"] == "mean" and config["data"]["lm_weight"] == 0.0
    capsys.readouterr()
    assert main(["classify", str(out), "a film\tit was great"]) == 0
    assert capsys.readouterr().out.split("\t")[0] in ("positive", "negative")


def test_an_imported_gpt2_continues_as_an_lm_and_becomes_a_classifier(
    tmp_path, sentiment, monkeypatch, capsys
):
    transformers = pytest.importorskip("transformers")
    from tests.hf import hf_folder
    from vaswani.interop import import_hf

    _, train, dev = sentiment
    text = tmp_path / "sentences.txt"
    text.write_text("".join(line.split("\t")[0] + "\n" for line in train.read_text().splitlines()[1:]))
    tokenizer = LMTokenizer.train([text.read_text()], "char", 0)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_embd=32, n_head=2, n_positions=64, vocab_size=tokenizer.vocab_size,
        bos_token_id=tokenizer.eos_id, eos_token_id=tokenizer.eos_id,
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(config)  # GPT-2's own initialisation
    run = import_hf(hf_folder(tmp_path / "hf", hf, tokenizer), tmp_path / "gpt2")
    initial = record_initial_state(monkeypatch)
    lm_args = ["--text", str(text), "--max-steps", "2", "--quiet", "--no-bf16"]
    assert main(["train", "lm", "--init", str(run), "--out", str(tmp_path / "more"), *lm_args]) == 0
    imported = load_file(run / "model.safetensors")
    assert all(torch.equal(initial[k], imported[k]) for k in imported)
    out = tmp_path / "cls"
    assert main(classify_args(run, train, dev, out, "--epochs", "20", "--pool", "mean")) == 0
    assert json.loads((out / "metrics.json").read_text())["valid_accuracy"] >= 0.8
    capsys.readouterr()
    assert main(["classify", str(out), "a great film"]) == 0
    assert capsys.readouterr().out.startswith("positive\t")
