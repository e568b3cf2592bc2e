"""The RNN encoder-decoder (``--arch rnn``, :mod:`vaswani.models.rnn`): its LSTMs read embeddings
of unit variance (the Transformer's scaling), one decoding step on its state is the full recompute,
beam 1 is greedy, a sentence does not depend on the others of its batch, it learns a copy task, and
a run of it trains, decodes, evaluates and resumes exactly through the same commands as the
Transformer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import tiny_args, write_reverse_task
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.generation.config import DecodingConfig
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.io import safetensors_metadata
from vaswani.models.rnn import RNNTranslator
from vaswani.pipelines.translation import Translator

DT = torch.float64
VOCAB, PAD, BOS, EOS = 12, 0, 1, 2
GREEDY = DecodingConfig(max_new_tokens=8)


def _model(layers: int = 2, tie: str = "output") -> RNNTranslator:
    cfg = ModelConfig(
        arch="rnn", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=16, n_heads=4, n_layers=layers,
        dropout=0.0, max_len=32, tie_embeddings=tie, pad_id=PAD,
    )  # fmt: skip
    torch.manual_seed(0)
    return RNNTranslator(cfg).to(DT).eval()


def _source() -> torch.Tensor:
    src = torch.randint(3, VOCAB, (3, 6), generator=torch.Generator().manual_seed(7))
    src[1, 3:] = PAD
    src[2, 5:] = PAD
    return src


@pytest.mark.parametrize("scale", [True, False])
def test_the_lstms_read_embeddings_of_unit_variance_as_the_transformer_does(scale):
    """The tables are drawn from N(0, 1/d): scaled by sqrt(d), as the Transformer's, each input
    component has variance 1; ``scale_embeddings`` off leaves 1/d (the defect that held the LSTM at
    8 BLEU on the embedded corpus: every gate started near 1/2 whatever the token)."""
    d = 64
    cfg = ModelConfig(
        arch="rnn", src_vocab_size=400, tgt_vocab_size=300, d_model=d, n_layers=1, dropout=0.0,
        tie_embeddings="output", scale_embeddings=scale,
    )  # fmt: skip
    torch.manual_seed(0)
    model, seen = RNNTranslator(cfg), {}
    for name in ("encoder", "decoder"):
        lstm = getattr(model, name)
        lstm.register_forward_pre_hook(lambda module, args, name=name: seen.setdefault(name, args[0]))
    ids = torch.randint(3, 300, (8, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        model(ids, ids)
    for name in ("encoder", "decoder"):
        variance = float(seen[name].var())
        assert variance == pytest.approx(1.0 if scale else 1.0 / d, rel=0.15), name


@pytest.mark.parametrize("layers,tie", [(1, "none"), (2, "output")])
def test_a_cached_step_equals_the_full_recompute(layers, tie):
    model, src = _model(layers, tie), _source()
    tgt = torch.randint(3, VOCAB, (3, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(src, tgt)
        source = model.start_decoding(src)
        steps = [model.decode(tgt[:, t : t + 1], source)[0] for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-10, rtol=0)


@pytest.mark.parametrize("use_cache", [True, False])
def test_beam_one_is_greedy_and_beams_cached_equal_uncached(use_cache):
    model, src = _model(), _source()
    eos = int(translate_ids(model, src, BOS, VOCAB, GREEDY).tokens[0, 2])  # rows end at different steps
    greedy = translate_ids(model, src, BOS, eos, replace(GREEDY, use_cache=use_cache))
    beam_one = DecodingConfig(strategy="beam", beam=1, max_new_tokens=8, use_cache=use_cache)
    assert torch.equal(translate_beam_ids(model, src, BOS, eos, beam_one).tokens[:, 0], greedy.tokens)
    wide = DecodingConfig(strategy="beam", beam=4, n_best=4, max_new_tokens=8)
    cached = translate_beam_ids(model, src, BOS, eos, wide)
    uncached = translate_beam_ids(model, src, BOS, eos, replace(wide, use_cache=False))
    assert torch.equal(cached.tokens, uncached.tokens)
    torch.testing.assert_close(cached.scores, uncached.scores, atol=1e-9, rtol=0)


def test_a_sentence_does_not_depend_on_the_others_of_its_batch():
    model, src = _model(), _source()
    tgt = torch.randint(3, VOCAB, (3, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        batched = model(src, tgt)
        for row in range(3):
            length = int((src[row] != PAD).sum())
            alone = model(src[row : row + 1, :length], tgt[row : row + 1])
            torch.testing.assert_close(batched[row : row + 1], alone, atol=1e-10, rtol=0)


def test_it_learns_a_copy_task():
    torch.manual_seed(0)
    cfg = ModelConfig(
        arch="rnn", src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=48, n_heads=4, n_layers=1,
        dropout=0.0, max_len=16, tie_embeddings="output", pad_id=PAD,
    )  # fmt: skip
    model = RNNTranslator(cfg)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    rng = torch.Generator().manual_seed(3)
    for _ in range(300):
        src = torch.randint(3, VOCAB, (32, 5), generator=rng)
        tgt_in = torch.cat([torch.full((32, 1), BOS), src], dim=1)
        tgt_out = torch.cat([src, torch.full((32, 1), EOS)], dim=1)
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    test = torch.randint(3, VOCAB, (64, 5), generator=rng)
    out = translate_ids(model.eval(), test, BOS, EOS, DecodingConfig(max_new_tokens=6)).tokens
    assert (out[:, :5] == test).all(dim=1).float().mean() >= 0.9
    assert (out[:, 5] == EOS).all()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, Path]:
    return write_reverse_task(tmp_path_factory.mktemp("rnn-data"), n=200)


FLAGS = ("--arch", "rnn", "--deterministic", "--checkpoint-every", "2", "--eval-every", "2")
FLAGS += ("--eval-sentences", "8", "--select-by", "loss")


def test_a_run_trains_decodes_evaluates_and_resumes_exactly(data, tmp_path, capsys):
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert main(tiny_args(*data, whole, *FLAGS, "--max-steps", "6")) == 0
    assert main(tiny_args(*data, part, *FLAGS, "--max-steps", "4")) == 0
    assert main(["train", "translation", "--resume", str(part), "--max-steps", "6", "--quiet"]) == 0
    assert (whole / "model.safetensors").read_bytes() == (part / "model.safetensors").read_bytes()
    best = [whole / "model.best.safetensors", part / "model.best.safetensors"]  # its metadata's order varies
    assert safetensors_metadata(best[0]) == safetensors_metadata(best[1])
    first, second = load_file(best[0]), load_file(best[1])
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    capsys.readouterr()
    assert main(["translate", str(whole), "--beam", "3", "a b c"]) == 0
    out, err = capsys.readouterr()
    weights = "vaswani: weights: model.best.safetensors (the best by loss: valid_loss "
    assert any(line.startswith(weights) for line in err.splitlines()), err  # after any note
    assert out.strip() == Translator.load(whole).translate(["a b c"], DecodingConfig(beam=3))[0]
    assert main(["evaluate", str(whole)]) == 0
    assert "BLEU" in capsys.readouterr().out
    for refused in (
        ["export-hf", str(whole), str(tmp_path / "hf")],
        ["attention", str(whole), "a b", "--out", str(tmp_path / "a.png")],
    ):
        assert main(refused) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--arch rnn" in err, refused


def test_arch_rnn_starts_from_the_rnns_own_recipes(tmp_path):
    """``--arch rnn`` picks the LSTM's recipes (their learning rate and clipping, not the
    Transformer's); flags still win over them, and configs/multi30k-rnn.yaml resolves to the files
    recipe's LSTM on configs/multi30k.yaml's data."""
    from vaswani.tasks import translation
    from vaswani.tasks.settings import run_config

    def resolved(flags, config=None):
        return run_config(translation.recipe, translation.configure, flags, config=config)

    transformer, rnn = resolved({}), resolved({"model": {"arch": "rnn"}})
    assert (transformer.model.arch, transformer.train.lr, transformer.train.clip_norm) == (
        "encoder_decoder",
        2e-3,
        1.0,
    )
    assert (rnn.model.arch, rnn.train.lr, rnn.train.clip_norm, rnn.train.max_steps) == (
        "rnn",
        1e-2,
        5.0,
        2000,
    )
    assert rnn.data == transformer.data and rnn.model.d_model == transformer.model.d_model
    src, tgt = write_reverse_task(tmp_path, n=20)
    files = resolved({"model": {"arch": "rnn"}, "data": {"src": src, "tgt": tgt}})
    assert (files.model.d_model, files.model.dropout, files.train.lr, files.train.clip_norm) == (
        256,
        0.2,
        5e-3,
        5.0,
    )
    assert resolved({"model": {"arch": "rnn"}, "train": {"lr": 3e-3}}).train.lr == 3e-3
    configs = Path(__file__).resolve().parents[1] / "configs"
    transformer, lstm = (
        resolved({}, config=configs / "multi30k.yaml"),
        resolved({}, config=configs / "multi30k-rnn.yaml"),
    )
    assert (lstm.model.arch, lstm.train.lr, lstm.train.clip_norm) == ("rnn", 5e-3, 5.0)
    assert lstm.data == transformer.data and lstm.model.tie_embeddings == transformer.model.tie_embeddings
    for field in ("batch_tokens", "max_minutes", "schedule", "precision", "eval_every", "eval_sentences"):
        assert getattr(lstm.train, field) == getattr(transformer.train, field), field
