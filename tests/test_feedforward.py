"""The feed-forward sublayer: the gated one (SwiGLU, GeGLU) against its formula and Hugging Face's
``LlamaMLP``, the plain one as it always was, models with the gated one training, and the Hugging
Face families without it refusing to export it."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import one_line, tiny_lm_run
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.generation.config import DecodingConfig
from vaswani.interop import bert as hf_bert
from vaswani.interop import gpt2 as hf_gpt2
from vaswani.interop import marian as hf_marian
from vaswani.layers.feedforward import FeedForward
from vaswani.layers.linear import ACTIVATIONS
from vaswani.models.bert import MaskedLM
from vaswani.models.gpt import GPT
from vaswani.models.transformer import Transformer
from vaswani.pipelines.lm import LanguageModel

TINY = {"d_model": 16, "n_heads": 2, "d_ff": 24, "n_layers": 2, "dropout": 0.0, "max_len": 16}


def _randomise_biases(module: nn.Module) -> None:
    """Biases drawn afresh (they start at zero in some models), so that a bias in the wrong place shows."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn_like(p))


@pytest.mark.parametrize("activation", ["silu", "gelu", "relu", "gelu_tanh"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_gated_ffn_is_the_formula(activation, bias, training):
    """FFN(x) = (act(x W_gate + b_gate) ⊙ (x W_up + b_up)) W_down + b_down, in training (F.linear) and
    in inference (oneDNN's fused kernel on the CPU: the same arithmetic reordered)."""
    torch.manual_seed(0)
    ffn = FeedForward(16, 24, activation, bias, kind="gated").train(training)
    _randomise_biases(ffn)
    x = torch.randn(3, 5, 16)
    g, u, d = ffn.gate_proj, ffn.up_proj, ffn.down_proj
    hidden = ACTIVATIONS[activation](x @ g.weight.T + (g.bias if bias else 0)) * (
        x @ u.weight.T + (u.bias if bias else 0)
    )
    expected = hidden @ d.weight.T + (d.bias if bias else 0)
    with torch.no_grad():
        torch.testing.assert_close(ffn(x), expected, atol=1e-5, rtol=1e-5)
    assert {n for n, _ in ffn.named_parameters()} == {
        f"{p}_proj.{w}" for p in ("gate", "up", "down") for w in (("weight", "bias") if bias else ("weight",))
    }


def test_gated_ffn_has_three_matrices_and_the_two_thirds_width_matches_the_plain_count():
    """3 · d · d_ff weights against 2 · d · d_ff; at d_ff = 2/3 · 4d the gated FFN has the plain one's
    count at 4d."""
    d = 48
    plain = FeedForward(d, 4 * d, "relu", bias=False)
    gated = FeedForward(d, 2 * 4 * d // 3, "silu", bias=False, kind="gated")
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(plain) == 2 * d * 4 * d
    assert count(gated) == 3 * d * (2 * 4 * d // 3) == count(plain)


def test_gpt_scales_the_gated_down_projection_like_the_plain_one():
    """GPT-2's initialisation: the projection into the residual stream (``down_proj``) has std
    0.02 / sqrt(2 · n_layers), the gate and up projections 0.02."""
    torch.manual_seed(4)
    cfg = ModelConfig(
        arch="decoder_only", **{**TINY, "d_model": 64, "d_ff": 256, "ffn": "gated", "n_layers": 8}
    )
    ffn = GPT(cfg).blocks.layers[0].ffn
    assert abs(ffn.down_proj.weight.std().item() - 0.02 / 4) < 0.0005
    assert abs(ffn.gate_proj.weight.std().item() - 0.02) < 0.002
    assert abs(ffn.up_proj.weight.std().item() - 0.02) < 0.002


@pytest.mark.parametrize("bias", [True, False])
def test_gated_ffn_equals_hugging_face_llama_mlp(bias):
    """Hugging Face's ``LlamaMLP`` (SwiGLU) with the same weights, loaded by name unchanged."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP

    config = transformers.LlamaConfig(
        hidden_size=16, num_attention_heads=2, intermediate_size=40, hidden_act="silu", mlp_bias=bias
    )
    torch.manual_seed(1)
    hf = LlamaMLP(config).eval()
    _randomise_biases(hf)
    ffn = FeedForward(16, 40, "silu", bias, kind="gated").eval()
    ffn.load_state_dict(hf.state_dict())
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(ffn(x), hf(x), atol=1e-5, rtol=1e-5)


def test_plain_ffn_is_unchanged():
    """The plain FFN draws the same weights as two ``nn.Linear`` made in order, keeps the names
    ``linear1``/``linear2`` that every run directory holds, and computes act(x W_1 + b_1) W_2 + b_2
    bit for bit; the default is plain, also for a config written before the field existed."""
    torch.manual_seed(2)
    ffn = FeedForward(16, 24, "gelu").train()
    torch.manual_seed(2)
    first, second = nn.Linear(16, 24), nn.Linear(24, 16)
    assert list(ffn.state_dict()) == ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"]
    assert torch.equal(ffn.linear1.weight, first.weight) and torch.equal(ffn.linear2.bias, second.bias)
    x = torch.randn(4, 16)
    assert torch.equal(ffn(x), second(F.gelu(first(x))))
    assert ModelConfig().ffn == "plain"
    assert ModelConfig.from_dict({"d_model": 16, "n_heads": 2}).ffn == "plain"


def test_ffn_bad_values_are_refused_naming_the_field():
    with pytest.raises(ConfigError) as exc:
        ModelConfig(ffn="swiglu")
    assert "ffn" in one_line(exc) and "gated" in one_line(exc)
    with pytest.raises(ValueError, match="kind"):
        FeedForward(8, 16, kind="swiglu")


@pytest.mark.parametrize("name,kind", [("swiglu", "silu"), ("geglu", "gelu")])
def test_activation_swiglu_is_the_gated_ffn_with_its_activation(tmp_path, name, kind):
    """``activation: swiglu`` (``geglu``) is ``ffn: gated`` with silu (gelu), from Python, a
    preset's overrides, a ``--config`` file and the flags alike, and is saved as the two fields;
    a source that also says ``ffn: plain`` is refused naming ``ffn``."""
    from vaswani.tasks import registry

    expected = ("gated", kind)
    assert (ModelConfig(activation=name).ffn, ModelConfig(activation=name).activation) == expected
    assert (lambda c: (c.ffn, c.activation))(ModelConfig.preset("gpt-mini", activation=name)) == expected
    config = tmp_path / "model.yaml"
    config.write_text(f"model: {{activation: {name}}}\n")
    for run in (
        registry.configure("lm", {"model": {"activation": name}}),
        registry.configure("lm", config=config),
    ):
        assert (run.model.ffn, run.model.activation) == expected
        assert (run.model.to_dict()["ffn"], run.model.to_dict()["activation"]) == expected
    with pytest.raises(ConfigError) as exc:
        registry.configure("lm", {"model": {"activation": name, "ffn": "plain"}})
    assert "'model.ffn'" in one_line(exc) and name in one_line(exc)


def _fits(model: nn.Module, loss_of: Callable[[nn.Module], torch.Tensor]) -> None:
    """A few Adam steps on one batch lower the loss, and every gated weight gets a gradient."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = loss_of(model)
        loss.backward()
        losses.append(loss.item())
        opt.step()
    ffns = [m for m in model.modules() if isinstance(m, FeedForward)]
    assert ffns and all(f.gated for f in ffns)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for f in ffns for p in f.parameters())
    assert losses[-1] < 0.7 * losses[0]


def test_gpt_bert_and_transformer_train_with_the_gated_ffn():
    torch.manual_seed(3)
    tokens = torch.randint(1, 40, (4, 12))
    swiglu = {**TINY, "ffn": "gated", "activation": "silu", "vocab_size": 40}
    gpt = GPT(ModelConfig(arch="decoder_only", norm="rmsnorm", norm_placement="pre", bias=False, **swiglu))
    _fits(gpt, lambda m: F.cross_entropy(m(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()))
    bert = MaskedLM(ModelConfig(arch="encoder_only", position="learned", **{**swiglu, "activation": "gelu"}))
    _fits(bert, lambda m: F.cross_entropy(m(tokens).flatten(0, 1), tokens.flatten()))
    transformer = Transformer(ModelConfig(**swiglu))
    _fits(
        transformer,
        lambda m: F.cross_entropy(m(tokens, tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten()),
    )


def test_train_lm_with_swiglu_decodes_and_export_to_gpt2_is_refused(tmp_path, capsys):
    run = tiny_lm_run(tmp_path, "--ffn", "gated", "--activation", "silu")
    assert json.loads((run / "config.json").read_text())["model"]["ffn"] == "gated"
    lm = LanguageModel.load(run)
    assert lm.model.blocks.layers[0].ffn.gated
    greedy = DecodingConfig(max_new_tokens=20, temperature=0.0)
    text = lm.generate(["the cat", "a"], greedy)
    assert all(len(t) > 0 for t in text)
    capsys.readouterr()
    assert main(["export-hf", str(run), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "model.ffn" in err and "plain" in err
    assert not (tmp_path / "hf").exists()


def test_exporting_a_gated_model_to_a_family_without_it_is_refused():
    """GPT-2, BERT and Marian have only the plain FFN: each refuses in one line naming ``model.ffn``."""
    gpt = ModelConfig.preset("gpt-mini").replace(ffn="gated")
    bert = hf_bert.config_from_hf({"model_type": "bert"}).replace(ffn="gated")
    marian = hf_marian.config_from_hf({"model_type": "marian"}).replace(ffn="gated")
    cases = [
        lambda: hf_gpt2.config_to_hf(gpt),
        lambda: hf_bert.config_to_hf(bert, mlm_head=True),
        lambda: hf_marian.config_to_hf(marian, None),  # refused before the tokenizer is read
    ]
    for export in cases:
        with pytest.raises(ConfigError) as exc:
            export()
        assert "'model.ffn'" in one_line(exc) and '"gated"' in one_line(exc)
