"""Minimum risk training (:mod:`vaswani.tasks.mrt`): the risk's gradient equals finite differences,
a cost equal for every candidate gives the risk no gradient, equal candidates are merged, and
``vaswani train translation --init RUN --objective mrt`` fine-tunes a run (beam or sampled
candidates) from its model, tokenizers and weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import tiny_args, write_reverse_task
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.generation.logprobs import sequence_log_probs
from vaswani.models.rnn import RNNTranslator
from vaswani.models.transformer import Transformer
from vaswani.tasks.mrt import expected_risk, merged

DT = torch.float64
VOCAB, PAD, BOS, EOS = 11, 0, 1, 2
SRC = torch.tensor([[3, 4, 5, 6], [7, 8, 9, PAD]])
CANDIDATES = [(3, 4, EOS), (4, EOS), (5, 5, 6, EOS), (9, 8), (EOS,)]  # (9, 8) reached its budget
OWNERS = torch.tensor([0, 0, 0, 1, 1])
SIZES = [3, 2]


def _model(arch: str) -> torch.nn.Module:
    cfg = ModelConfig(
        arch=arch, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=8, n_heads=2, d_ff=16, n_layers=1,
        dropout=0.0, max_len=16, tie_embeddings="output", pad_id=PAD,
    )  # fmt: skip
    torch.manual_seed(0)
    return (RNNTranslator(cfg) if arch == "rnn" else Transformer(cfg)).to(DT)


def _risk(model: torch.nn.Module, costs: torch.Tensor, alpha: float) -> torch.Tensor:
    log_probs = sequence_log_probs(model, SRC.index_select(0, OWNERS), CANDIDATES, BOS, PAD)
    return expected_risk(log_probs, costs, SIZES, alpha).sum()


@pytest.mark.parametrize("arch,alpha", [("encoder_decoder", 1.0), ("rnn", 0.5)])
def test_the_risk_gradient_equals_finite_differences(arch, alpha):
    model = _model(arch)
    costs = torch.tensor([0.1, 0.9, 0.4, 0.3, 1.0], dtype=DT)
    _risk(model, costs, alpha).backward()
    checked = 0
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        for index in list(torch.randperm(p.numel(), generator=torch.Generator().manual_seed(1))[:3]):
            flat, eps = p.data.view(-1), 1e-6
            keep = float(flat[index])
            flat[index] = keep + eps  # evaluated with gradients on: the training path of the layers
            up = float(_risk(model, costs, alpha).detach())
            flat[index] = keep - eps
            down = float(_risk(model, costs, alpha).detach())
            flat[index] = keep
            assert float(p.grad.view(-1)[index]) == pytest.approx((up - down) / (2 * eps), abs=1e-7), name
            checked += 1
    assert checked > 20


def test_a_cost_equal_for_every_candidate_gives_no_risk_gradient():
    model = _model("encoder_decoder")
    risk = _risk(model, torch.full((5,), 0.7, dtype=DT), 1.0)
    assert float(risk) == pytest.approx(0.7 * len(SIZES))
    risk.backward()
    assert max(float(p.grad.abs().max()) for p in model.parameters()) < 1e-12


def test_the_log_probs_are_teacher_forced_sums():
    model = _model("encoder_decoder").eval()
    got = sequence_log_probs(model, SRC.index_select(0, OWNERS), CANDIDATES, BOS, PAD)
    for i, u in enumerate(CANDIDATES):
        tgt_in = torch.tensor([[BOS, *u[:-1]]])
        log_probs = model(SRC[OWNERS[i]][None], tgt_in)[0].log_softmax(dim=-1)
        expected = sum(float(log_probs[t, token]) for t, token in enumerate(u))
        assert float(got[i]) == pytest.approx(expected, abs=1e-10)


def test_equal_candidates_are_merged():
    rows = [[5, 6, EOS, PAD], [5, 6, EOS, 7], [5, PAD, PAD, PAD], [5, 6, 3, 4], [5, 6, EOS, PAD]]
    assert merged(rows, EOS, PAD) == [(5, 6, EOS), (5,), (5, 6, 3, 4)]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("mrt")
    src, tgt = write_reverse_task(folder, n=200)
    assert main(tiny_args(src, tgt, folder / "base", "--max-steps", "8")) == 0
    return src, tgt, folder / "base"


@pytest.mark.parametrize("search", ["beam", "sample"])
def test_mrt_fine_tunes_a_run_from_its_model_and_tokenizers(base, tmp_path, search):
    src, tgt, run = base
    out = tmp_path / "mrt"
    args = tiny_args(src, tgt, out, "--init", str(run), "--objective", "mrt", "--mrt-candidates", "3")
    del args[args.index("--preset") : args.index("--preset") + 2]  # the model is the --init run's
    assert main([*args, "--mrt-search", search, "--max-steps", "2", "--deterministic"]) == 0
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["model"] == json.loads((run / "config.json").read_text(encoding="utf-8"))["model"]
    assert config["data"]["objective"] == "mrt" and config["data"]["init"] == str(run)
    assert (out / "src_tokenizer.json").read_bytes() == (run / "src_tokenizer.json").read_bytes()
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["steps"] == 2


def test_mrt_without_a_corpus_goes_on_with_the_init_runs(base, tmp_path):
    src, tgt, run = base
    out = tmp_path / "mrt"
    args = ["train", "translation", "--init", str(run), "--objective", "mrt", "--mrt-candidates", "2"]
    assert main([*args, "--max-steps", "1", "--eval-every", "1000", "--quiet", "--out", str(out)]) == 0
    data = json.loads((out / "config.json").read_text(encoding="utf-8"))["data"]
    assert (data["source"], data["src"], data["tgt"]) == ("files", str(src), str(tgt))
