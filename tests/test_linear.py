"""``Linear``: the oneDNN inference path computes what ``F.linear`` and the activation compute,
for every shape a model feeds it, and training, autocast and other dtypes keep PyTorch's path."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.helpers import linear_reference
from vaswani.layers.linear import ACTIVATIONS, HAS_ONEDNN, Linear, onednn_applies

SHAPES = [(5, 16), (2, 3, 16), (0, 16), (2, 0, 16), (2, 3, 4, 16)]


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
