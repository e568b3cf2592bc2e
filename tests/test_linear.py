"""``Linear``: the oneDNN inference path computes what ``F.linear`` and the activation compute,
for every shape a model feeds it, and training, autocast and other dtypes keep PyTorch's path; the
oneDNN training path (forward and backward) computes what ``F.linear``'s autograd computes."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from tests.helpers import linear_reference
from vaswani.layers import kernels
from vaswani.layers.blocked import block_projections, refresh_blocked
from vaswani.layers.feedforward import FeedForward
from vaswani.layers.linear import ACTIVATIONS, HAS_ONEDNN, Linear, onednn_applies

SHAPES = [(5, 16), (2, 3, 16), (0, 16), (2, 0, 16), (2, 3, 4, 16)]


@pytest.fixture(autouse=True)
def onednn_at_every_size(monkeypatch):
    """The layers here are small: F.linear would compute their products (``kernels.small_product``),
    and the oneDNN path would go untested."""
    monkeypatch.setattr(kernels, "SMALL_WEIGHT", 0)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("shape", SHAPES)
def test_inference_equals_linear_then_activation(shape, activation, bias):
    torch.manual_seed(0)
    layer = Linear(16, 24, bias=bias)
    x = torch.randn(*shape) * 3
    with torch.no_grad():
        out = layer(x, activation)
    assert out.shape == (*shape[:-1], 24)
    torch.testing.assert_close(out, linear_reference(layer, x, activation), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("make", [lambda: torch.randn(4, 7, 16)[:, -1:], lambda: torch.randn(16, 5).t()])
def test_inference_on_strided_inputs(make):
    """The decoder's last position (a slice) and transposed views must not be read as contiguous."""
    torch.manual_seed(1)
    layer, x = Linear(16, 24), make()
    assert not x.is_contiguous()
    with torch.inference_mode():
        torch.testing.assert_close(layer(x, "gelu"), linear_reference(layer, x, "gelu"), atol=1e-5, rtol=1e-5)


def test_training_takes_pytorchs_path_and_gradients_flow():
    torch.manual_seed(2)
    layer, x = Linear(16, 24), torch.randn(3, 16, requires_grad=True)
    assert not onednn_applies(x, layer.weight)
    out = layer(x, "silu")
    out.sum().backward()
    ref = Linear(16, 24)
    ref.load_state_dict(layer.state_dict())
    x_ref = x.detach().clone().requires_grad_()
    linear_reference(ref, x_ref, "silu").sum().backward()
    torch.testing.assert_close(out, linear_reference(ref, x_ref, "silu"))
    torch.testing.assert_close(layer.weight.grad, ref.weight.grad)
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_autocast_and_other_dtypes_are_left_to_pytorch():
    layer = Linear(16, 24)
    x = torch.randn(3, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert not onednn_applies(x, layer.weight)
        assert layer(x).dtype == torch.bfloat16
    with torch.no_grad():
        assert not onednn_applies(x.double(), layer.weight.double())
        assert onednn_applies(x, layer.weight) == HAS_ONEDNN


def test_same_parameters_as_nn_linear():
    layer, plain = Linear(16, 24), nn.Linear(16, 24)
    assert layer.state_dict().keys() == plain.state_dict().keys()
    assert isinstance(layer, nn.Linear)


# ---------------------------------------------------------------------------------------------
# Training through oneDNN's linear (where MKL skips AVX-512)

needs_onednn = pytest.mark.skipif(
    not (kernels.HAS_ONEDNN and kernels.HAS_CUSTOM_OP), reason="this torch has no oneDNN linear or custom ops"
)


def gradients(layer: Linear, x: torch.Tensor, activation: str, oneDNN: bool) -> list[torch.Tensor]:
    """The output and the gradients (x, W, b) of a random cotangent, by ``onednn_train_linear`` or by
    ``F.linear``'s autograd."""
    x = x.detach().clone().requires_grad_()
    layer.zero_grad(set_to_none=True)
    product = kernels.onednn_train_linear if oneDNN else torch.nn.functional.linear
    out = ACTIVATIONS[activation](product(x, layer.weight, layer.bias))
    out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(7)))
    grads = [x.grad, layer.weight.grad] + ([layer.bias.grad] if layer.bias is not None else [])
    return [out.detach(), *grads]


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(5, 16),
        lambda: torch.randn(2, 33, 16),
        lambda: torch.randn(2, 3, 4, 16),
        lambda: torch.randn(4, 7, 16)[:, -3:],  # a slice: not contiguous
        lambda: torch.randn(16, 9).t(),  # a transposed view
    ],
)
def test_onednn_training_equals_f_linear_forward_and_backward(make, bias):
    torch.manual_seed(4)
    layer, x = Linear(16, 24, bias=bias), make() * 3
    fast, reference = gradients(layer, x, "gelu", True), gradients(layer, x, "gelu", False)
    for a, b in zip(fast, reference, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 16)])
def test_training_on_no_rows_gives_zero_gradients_without_a_warning(shape, monkeypatch):
    monkeypatch.setattr(kernels, "MKL_SKIPS_AVX512", True)
    layer, x = Linear(16, 24), torch.randn(*shape, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = layer(x, "gelu")
        out.sum().backward()
    assert out.shape == (*shape[:-1], 24) and x.grad.shape == shape
    assert torch.equal(layer.weight.grad, torch.zeros(24, 16))


@needs_onednn
def test_onednn_training_computes_only_the_gradients_asked_for():
    torch.manual_seed(5)
    layer, x = Linear(16, 24), torch.randn(3, 16, requires_grad=True)
    layer.weight.requires_grad_(False)
    kernels.onednn_train_linear(x, layer.weight, layer.bias).sum().backward()
    assert layer.weight.grad is None
    torch.testing.assert_close(x.grad, layer.weight.sum(0).expand(3, 16))
    torch.testing.assert_close(layer.bias.grad, torch.full((24,), 3.0))


@needs_onednn
def test_where_mkl_skips_avx512_fp32_training_takes_onednn(monkeypatch):
    """Forward, grad_x and grad_W are three calls of the op; inference, autocast, float64, no
    gradients and an Intel CPU keep their paths."""
    calls = []
    op = kernels.ONEDNN_TRAINING

    def counted(*args: object) -> torch.Tensor:
        calls.append(args[3])
        return op(*args)

    monkeypatch.setattr(kernels, "ONEDNN_TRAINING", counted)
    monkeypatch.setattr(kernels, "MKL_SKIPS_AVX512", True)
    layer, x = Linear(16, 24), torch.randn(3, 16, requires_grad=True)
    assert kernels.onednn_trains(x, layer.weight)
    layer(x, "silu").sum().backward()
    assert calls == ["none"] * 3
    with torch.no_grad():
        assert not kernels.onednn_trains(x, layer.weight)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not kernels.onednn_trains(x, layer.weight)
    assert not kernels.onednn_trains(x.double(), layer.weight.double())
    assert not kernels.onednn_trains(x.detach(), layer.weight.detach())
    monkeypatch.setattr(kernels, "MKL_SKIPS_AVX512", False)
    assert not kernels.onednn_trains(x, layer.weight)


def test_the_cpu_vendor_and_avx512_decide():
    def cpuinfo(vendor: str, flags: str) -> str:
        return f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: 26\nflags\t\t: fpu sse2 {flags}\n"

    assert kernels.mkl_skips_avx512(cpuinfo("AuthenticAMD", "avx2 avx512f avx512_bf16"))
    assert not kernels.mkl_skips_avx512(cpuinfo("AuthenticAMD", "avx2"))  # AVX2 in both libraries
    assert not kernels.mkl_skips_avx512(cpuinfo("GenuineIntel", "avx2 avx512f amx_bf16"))
    assert not kernels.mkl_skips_avx512("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd\n")  # Arm
    assert not kernels.mkl_skips_avx512("")


@needs_onednn
def test_an_onednn_op_that_fails_in_training_falls_back_to_pytorch_once_with_a_warning(monkeypatch):
    def broken(*args: object) -> torch.Tensor:
        raise RuntimeError("mkldnn: unsupported\nsecond line")

    monkeypatch.setattr(kernels, "ONEDNN_TRAINING", broken)
    torch.manual_seed(6)
    layer, x = Linear(16, 24), torch.randn(2, 5, 16)
    reference = gradients(layer, x, "relu", False)
    with pytest.warns(RuntimeWarning, match=r"oneDNN's linear failed in training \(mkldnn: unsupported\)"):
        fallback = gradients(layer, x, "relu", True)
    assert kernels.ONEDNN_TRAINING is None
    assert not kernels.onednn_trains(x.requires_grad_(), layer.weight)
    for a, b in zip(fallback, reference, strict=True):
        torch.testing.assert_close(a, b)


@needs_onednn
def test_onednn_training_inside_torch_compile_is_one_graph_with_eager_gradients(monkeypatch):
    """The products are one custom op to dynamo (no graph break), in the forward and the backward
    graph, and the compiled step gives the gradients of eager ``F.linear``."""
    calls = []
    op = kernels.ONEDNN_TRAINING

    def counted(*args: object) -> torch.Tensor:
        calls.append(args[3])
        return op(*args)

    torch.manual_seed(8)
    ffn, x = FeedForward(16, 32, "gelu"), torch.randn(2, 5, 16)
    monkeypatch.setattr(kernels, "MKL_SKIPS_AVX512", False)
    ffn(x).square().sum().backward()
    eager = [p.grad for p in ffn.parameters()]
    ffn.zero_grad(set_to_none=True)
    monkeypatch.setattr(kernels, "MKL_SKIPS_AVX512", True)
    monkeypatch.setattr(kernels, "ONEDNN_TRAINING", counted)
    compiled = torch.compile(ffn, backend="aot_eager", fullgraph=True, dynamic=True)
    compiled(x).square().sum().backward()
    assert len(calls) == 5  # 2 forward products, 2 grad_W, the grad_x of the second layer (x needs none)
    for p, g in zip(ffn.parameters(), eager, strict=True):
        torch.testing.assert_close(p.grad, g)


@pytest.mark.parametrize("out_features", [32, 21])
def test_blocked_weight_holds_16_output_columns_a_block_zero_padded(out_features):
    weight = torch.randn(out_features, 5)
    blocked = kernels.blocked_weight(weight)
    assert blocked.shape == (-(-out_features // 16), 5, 16) and blocked.is_contiguous()
    n, k = torch.meshgrid(torch.arange(out_features), torch.arange(5), indexing="ij")
    assert torch.equal(blocked[n // 16, k, n % 16], weight)
    padding = torch.arange(out_features, blocked.shape[0] * 16)
    assert not blocked[padding // 16, :, padding % 16].any()


BLOCKED_INPUTS = {
    "1 row": lambda: torch.randn(1, 16),
    "1 row, 3-d": lambda: torch.randn(1, 1, 16),
    "a decoder's last position": lambda: torch.randn(1, 7, 16)[:, -1:],
    "2 rows": lambda: torch.randn(2, 1, 16),
    "3 rows": lambda: torch.randn(3, 16),
    "no rows": lambda: torch.randn(0, 16),
}


@pytest.mark.parametrize("activation", ["none", "gelu"])
@pytest.mark.parametrize("make", BLOCKED_INPUTS.values(), ids=BLOCKED_INPUTS)
@pytest.mark.parametrize("out_features", [24, 32])
def test_compiled_products_of_one_or_two_rows_read_blocked_weights(
    make, out_features, activation, monkeypatch
):
    """Traced by ``torch.compile``, a layer with blocked weights computes rows <= BLOCKED_ROWS from them
    (the product counted at tracing), F.linear's values; three rows, and eager calls, F.linear's path."""
    torch.manual_seed(2)
    layer, x = Linear(16, out_features), make()
    traced = []
    product = kernels.blocked_product
    monkeypatch.setattr("vaswani.layers.linear.blocked_product", lambda *a: traced.append(1) or product(*a))
    assert block_projections(nn.Sequential(layer)) == [layer] and layer.blocked is not None
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(lambda t: layer(t, activation), backend="eager", fullgraph=True)(x)
        expected = len(traced)
        assert expected == (x.numel() // 16 <= kernels.BLOCKED_ROWS)
        torch.testing.assert_close(out, linear_reference(layer, x, activation), atol=1e-5, rtol=1e-5)
        layer(x, activation)
    assert len(traced) == expected


def test_blocked_weights_are_made_for_float32_cpu_projections_only_and_refreshed_in_place():
    model = nn.Sequential(Linear(16, 8), Linear(8, 4).double(), nn.Linear(4, 4))
    projections = block_projections(model)
    assert projections == [model[0]] and model[1].blocked is None
    blocked = model[0].blocked
    with torch.no_grad():
        model[0].weight.mul_(2)
    refresh_blocked(model[0])
    assert model[0].blocked is blocked and torch.equal(blocked, kernels.blocked_weight(model[0].weight))
    with torch.no_grad():
        model[0].weight.add_(1)
    assert block_projections(model)[0].blocked is blocked  # the same tensor, copied again
    assert torch.equal(blocked, kernels.blocked_weight(model[0].weight))
