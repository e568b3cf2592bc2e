"""Weight-only int8 and bf16 weights for inference (layers/quantize.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.helpers import tiny_args, tiny_lm_run, write_reverse_task
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.layers import kernels, quantize
from vaswani.layers.blocked import block_projections
from vaswani.layers.linear import Linear
from vaswani.layers.quantize import Int8Linear, prepare_weights, quantize_int8, quantize_weight
from vaswani.models.gpt import GPT
from vaswani.models.transformer import Transformer
from vaswani.pipelines.lm import LanguageModel
from vaswani.pipelines.lm_text import stream_loss
from vaswani.serve.loading import load_models


def test_weights_are_per_row_symmetric_int8_within_half_a_step():
    torch.manual_seed(0)
    w = torch.randn(24, 40) * torch.linspace(0.01, 3.0, 24)[:, None]  # rows of very different size
    w[5] = 0.0
    q, scales = quantize_weight(w)
    assert q.dtype == torch.int8 and scales.shape == (24,)
    assert int(q.abs().max()) == 127 and int(q[5].abs().max()) == 0
    torch.testing.assert_close(scales[:5], w[:5].abs().amax(dim=1) / 127)
    error = (q.float() * scales[:, None] - w).abs()
    assert bool((error <= scales[:, None] / 2 + 1e-7).all())


@pytest.fixture
def weight_only(monkeypatch):
    """The weight-only paths (``_weight_int8pack_mm`` or the dequantized weight), as where
    ``torch._int_mm`` is not available."""
    monkeypatch.setattr(quantize, "_NO_INT_MM", [True])


@pytest.mark.parametrize("shape", [(7, 40), (2, 3, 40), (1, 1, 40)])
@pytest.mark.parametrize("bias", [True, False])
def test_int8_matmul_is_within_the_bound_of_the_scale(shape, bias, weight_only):
    """|y_int8 − y_fp32| <= Σ_i |x_i| · s_o / 2 for each output o (plus float32 rounding)."""
    torch.manual_seed(1)
    linear = Linear(40, 24, bias=bias).eval()
    x = torch.randn(*shape)
    int8 = Int8Linear(linear).eval()
    with torch.no_grad():
        got, want = int8(x), linear(x)
    assert got.shape == want.shape == (*shape[:-1], 24)
    bound = x.abs().sum(dim=-1, keepdim=True) * int8.scales / 2
    assert bool(((got - want).abs() <= bound + 1e-5).all())
    assert float((got - want).abs().max()) > 0  # the weights did change
    torch.testing.assert_close(int8(x, "gelu"), torch.nn.functional.gelu(got))


def test_the_kernel_and_the_dequantized_path_agree(monkeypatch, weight_only):
    torch.manual_seed(2)
    int8 = Int8Linear(nn.Linear(64, 32)).eval()
    x = torch.randn(5, 64)
    kernel = int8(x)
    monkeypatch.setattr(quantize, "_NO_KERNEL", {("cpu", torch.float32)})
    torch.testing.assert_close(int8(x), kernel, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(kernel, x @ int8.dequantized(torch.float32).T + int8.bias)


@pytest.mark.parametrize("shape", [(1, 40), (1, 1, 40), (2, 40), (3, 40)])
@pytest.mark.parametrize("bias", [True, False])
def test_compiled_rows_of_an_int8_layer_are_the_weight_only_product(shape, bias, monkeypatch):
    """Traced by ``torch.compile`` with its blocked int8 weights, one or two rows are x (s ⊙ q)ᵀ + b
    from them (the product counted at tracing; weight-only: the activations not quantized); three
    rows the weight-only kernel's product."""
    torch.manual_seed(4)
    int8 = Int8Linear(nn.Linear(40, 24, bias=bias)).eval()
    assert block_projections(nn.Sequential(int8)) == [int8] and int8.blocked.dtype == torch.int8
    traced = []
    product = kernels.blocked_product
    monkeypatch.setattr(quantize, "blocked_product", lambda *a: traced.append(1) or product(*a))
    x = torch.randn(*shape)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(lambda t: int8(t, "gelu"), backend="eager", fullgraph=True)(x)
    assert len(traced) == (x.numel() // 40 <= kernels.BLOCKED_ROWS)
    weight_only = F.gelu(F.linear(x, int8.dequantized(torch.float32), int8.bias))
    torch.testing.assert_close(got, weight_only, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not kernels.int8_rows_apply(torch.zeros(1)), reason="torch._int_mm on the CPU")
@pytest.mark.parametrize("shape", [(7, 40), (2, 3, 40), (1, 1, 40)])
@pytest.mark.parametrize("bias", [True, False])
def test_int8_rows_are_the_product_of_quantized_rows_and_within_its_bound(shape, bias):
    """The CPU path equals its definition in float64 (each row of x as int8, x_q = round(x / s_x),
    s_x = max |x| / 127, times q, scaled by s_x s_o, plus the bias); it is within Σ_i |x_i| s_o / 2 +
    Σ_i |s_o q_oi| s_x / 2 of the float32 layer; and a row's output is the same alone or in a batch."""
    torch.manual_seed(3)
    linear = Linear(40, 24, bias=bias).eval()
    x = torch.randn(*shape) * torch.linspace(0.1, 10, shape[-2])[:, None]  # rows of different size
    int8 = Int8Linear(linear).eval()
    with torch.no_grad():
        got, want = int8(x), linear(x)
    flat = x.reshape(-1, 40).double()
    s_x = flat.abs().amax(dim=1, keepdim=True) / 127
    w = int8.weight_int8.double() * int8.scales.double()[:, None]
    reference = torch.round(flat / s_x) * s_x @ w.T + (0 if int8.bias is None else int8.bias.double())
    torch.testing.assert_close(got.reshape(-1, 24).double(), reference, atol=1e-5, rtol=1e-5)
    bound = (
        x.abs().sum(-1, keepdim=True) * int8.scales / 2
        + w.abs().sum(-1).float() * s_x.float().reshape(*shape[:-1], 1) / 2
    )
    assert bool(((got - want).abs() <= bound + 1e-5).all())
    one_by_one = torch.cat([int8(row[None]) for row in x.reshape(-1, 40)])
    assert torch.equal(one_by_one, got.reshape(-1, 24))


def test_training_an_int8_layer_is_refused():
    int8 = Int8Linear(nn.Linear(8, 4))
    with pytest.raises(ConfigError, match="inference only"):
        int8.train()(torch.randn(2, 8))


def _gpt(tie: str = "output") -> GPT:
    cfg = ModelConfig(
        arch="decoder_only", tgt_vocab_size=50, d_model=32, n_heads=4, d_ff=64, n_decoder_layers=2,
        dropout=0.0, max_len=32, position="learned", norm="pre_ln", tie_embeddings=tie,
    )  # fmt: skip
    torch.manual_seed(0)
    return GPT(cfg).eval()


@pytest.mark.parametrize("tie", ["output", "none"])
def test_every_linear_is_swapped_and_embeddings_kept(tie):
    model = _gpt(tie)
    table = model.embed.token.weight.detach().clone()
    tokens = torch.randint(0, 50, (2, 12))
    fp32 = model(tokens)
    quantize_int8(model)
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    linears = [m for m in model.modules() if isinstance(m, Int8Linear)]
    assert len(linears) == 2 * 6 + 1  # q, k, v, out, two FFN layers a block; the head
    assert isinstance(model.output, Int8Linear)
    assert torch.equal(model.embed.token.weight, table)
    int8 = model(tokens)
    error = float((int8 - fp32).detach().abs().max())
    assert 0 < error < 0.05 * float(fp32.detach().abs().max())


def test_encoder_decoder_is_quantized_too():
    cfg = ModelConfig(
        src_vocab_size=30, tgt_vocab_size=30, d_model=32, n_heads=4, d_ff=64, n_layers=1,
        dropout=0.0, max_len=16, tie_embeddings="output",
    )  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    src, tgt = torch.randint(4, 30, (2, 7)), torch.randint(4, 30, (2, 5))
    fp32 = model(src, tgt)
    prepare_weights(model, "int8")
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
    torch.testing.assert_close(model(src, tgt), fp32, atol=0.05, rtol=0.05)


@pytest.mark.parametrize("quantized", [None, "int8"])
def test_bf16_weights_compute_in_bf16(quantized):
    model = _gpt()
    tokens = torch.randint(0, 50, (1, 10))
    fp32 = model(tokens)
    prepare_weights(model, quantized, "bf16")
    assert model.embed.token.weight.dtype == torch.bfloat16
    logits = model(tokens)
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(logits.float(), fp32, atol=0.1, rtol=0.05)


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory) -> Path:
    return tiny_lm_run(tmp_path_factory.mktemp("quantize"))


def test_perplexity_of_a_trained_model_stays_within_a_percent(lm_run):
    text = (lm_run.parent / "train.txt").read_text(encoding="utf-8")
    lm = LanguageModel.load(lm_run, "cpu")
    ids = torch.tensor(lm.tokenizer.encode(text))
    fp32 = stream_loss(lm.model, ids, vocab_size=lm.tokenizer.vocab_size)
    int8 = stream_loss(quantize_int8(lm.model), ids, vocab_size=lm.tokenizer.vocab_size)
    assert int8 != fp32
    assert abs(math.exp(int8) / math.exp(fp32) - 1) < 0.01


def test_unknown_values_are_refused():
    with pytest.raises(ConfigError, match="--quantize"):
        prepare_weights(_gpt(), "int4")
    with pytest.raises(ConfigError, match="--dtype"):
        prepare_weights(_gpt(), None, "fp8")


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    assert main(argv) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_generate_with_int8_or_bf16_weights_and_a_draft(lm_run, capsys):
    prompt = ["generate", str(lm_run), "the cat", "--max-new-tokens", "30", "--temperature", "0"]
    plain, _ = _run(prompt, capsys)
    drafted, err = _run([*prompt, "--draft", str(lm_run)], capsys)
    assert drafted == plain
    assert "accepted (100.0%), 30 tokens in" in err
    for flags in (["--quantize", "int8"], ["--dtype", "bf16"], ["--quantize", "int8", "--dtype", "bf16"]):
        out, _ = _run([*prompt, *flags], capsys)
        assert out.startswith("the cat") and len(out) > len("the cat\n")
        with_draft, _ = _run([*prompt, *flags, "--draft", str(lm_run), "--draft-tokens", "3"], capsys)
        assert with_draft == out  # the quantized model's own greedy output


def test_evaluate_reports_perplexity_of_the_prepared_weights(lm_run, capsys):
    text = str(lm_run.parent / "train.txt")
    scores = {}
    for flags in ([], ["--quantize", "int8"], ["--dtype", "bf16"]):
        out, _ = _run(["evaluate", str(lm_run), "--text", text, *flags], capsys)
        scores[" ".join(flags)] = float(out.split("loss ")[1].split()[0])
    assert len(set(scores.values())) == 3, scores  # the weights did change
    for value in scores.values():
        assert abs(math.exp(value - scores[""]) - 1) < 0.02  # perplexity within 2%


def test_translate_and_serve_with_int8_weights(tmp_path, capsys):
    src, tgt = write_reverse_task(tmp_path, n=100)
    run = tmp_path / "tr"
    assert main(tiny_args(src, tgt, run, "--max-steps", "4")) == 0
    capsys.readouterr()
    out, _ = _run(["translate", str(run), "a b c", "--quantize", "int8", "--dtype", "bf16"], capsys)
    assert out.strip()
    served = load_models([run], "cpu", "int8")
    model = next(iter(served.values())).wrapper.model
    assert isinstance(model.output, Int8Linear)
    assert not any(isinstance(m, nn.Linear) for m in model.modules())
