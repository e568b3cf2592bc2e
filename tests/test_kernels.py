"""``layers/kernels.py``: each kernel choice picks what was measured, the layers give the same
results whichever kernel runs, and the private oneDNN op falls back to ``F.linear`` cleanly when
it is missing or fails."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import linear_reference
from vaswani.layers import attention, kernels
from vaswani.layers.attention import KVCache, MultiHeadAttention
from vaswani.layers.feedforward import FeedForward
from vaswani.layers.linear import ACTIVATIONS, Linear

# ---------------------------------------------------------------------------------------------
# SDPA or the explicit path


@pytest.mark.parametrize(
    ("shape", "dtype", "grad", "explicit"),
    [
        ((64, 4, 20, 16), torch.bfloat16, True, True),  # half-precision training: slow flash backward
        ((64, 4, 20, 16), torch.float16, True, True),
        ((64, 4, 20, 16), torch.float32, True, False),  # fp32 training keeps SDPA
        ((64, 4, 1, 16), torch.bfloat16, False, False),  # half-precision inference keeps SDPA
        ((64, 4, 1, 16), torch.float32, False, True),  # a decoding step of 256 rows · heads
        ((64, 4, 8, 16), torch.float32, False, True),  # a source's 8 hypotheses together
        ((64, 4, 9, 16), torch.float32, False, False),  # more queries: SDPA
        ((63, 4, 1, 16), torch.float32, False, False),  # fewer rows · heads: SDPA
        ((1, 4, 1, 16), torch.float32, False, False),  # batch-1 generation: SDPA is faster
    ],
)
def test_the_explicit_path_where_it_was_measured_faster(shape, dtype, grad, explicit):
    q = torch.zeros(shape, dtype=dtype, requires_grad=grad)
    assert kernels.explicit_attention_is_faster(q) is explicit


@pytest.mark.parametrize("kind", ["causal", "cross", "cross_grouped", "cached_step"])
def test_attention_is_the_same_on_either_kernel(kind, monkeypatch):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, cross=kind.startswith("cross"), causal=kind != "cross").eval()
    x = torch.randn(4, 5, 16)
    memory = torch.randn(2 if kind == "cross_grouped" else 4, 7, 16)
    mask = torch.ones(memory.shape[0], 1, 1, 7, dtype=torch.bool)
    mask[0, ..., 5:] = False

    def run(explicit: bool) -> torch.Tensor:
        monkeypatch.setattr(attention, "explicit_attention_is_faster", lambda q: explicit)
        with torch.no_grad():
            if kind == "cached_step":
                cache = KVCache()
                layer(x[:, :4], cache=cache)
                return layer(x[:, 4:], cache=cache)[0]
            if kind == "causal":
                return layer(x)[0]
            return layer(x, memory, mask)[0]

    torch.testing.assert_close(run(True), run(False), atol=1e-6, rtol=1e-5)


def _refuse(*args: object, **kwargs: object) -> torch.Tensor:
    raise AssertionError("SDPA was called")


def test_a_decoding_step_of_many_rows_takes_the_explicit_path_and_batch_1_sdpa(monkeypatch):
    """The choice is consulted: with SDPA unavailable a step of 64 rows · 4 heads still runs, and
    the same step of one row calls SDPA."""
    monkeypatch.setattr(F, "scaled_dot_product_attention", _refuse)
    torch.manual_seed(1)
    layer = MultiHeadAttention(16, 4, causal=True).eval()
    for rows, calls_sdpa in ((64, False), (1, True)):
        cache, x = KVCache(), torch.randn(rows, 3, 16)
        with torch.no_grad():
            if calls_sdpa:
                with pytest.raises(AssertionError, match="SDPA was called"):
                    layer(x[:, :2], cache=cache)
            else:
                layer(x[:, :2], cache=cache)
                assert layer(x[:, 2:], cache=cache)[0].shape == (rows, 1, 16)


# ---------------------------------------------------------------------------------------------
# oneDNN's linear or F.linear


@pytest.fixture
def onednn_at_every_size(monkeypatch):
    """oneDNN's linear for the small layers of these tests too (``kernels.small_product``)."""
    monkeypatch.setattr(kernels, "SMALL_WEIGHT", 0)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_without_the_onednn_op_linear_is_f_linear_and_agrees_with_the_normal_path(
    activation, monkeypatch, onednn_at_every_size
):
    torch.manual_seed(2)
    layer, x = Linear(16, 24), torch.randn(2, 3, 16) * 3
    with torch.no_grad():
        normal = layer(x, activation)
        monkeypatch.setattr(kernels, "ONEDNN_LINEAR", None)
        assert not kernels.onednn_applies(x, layer.weight)
        fallback = layer(x, activation)
    assert torch.equal(fallback, linear_reference(layer, x, activation))
    torch.testing.assert_close(fallback, normal, atol=1e-5, rtol=1e-5)


def test_an_onednn_op_that_fails_is_turned_off_once_with_a_warning(monkeypatch, onednn_at_every_size):
    calls = []

    def broken(*args: object) -> torch.Tensor:
        calls.append(args)
        raise RuntimeError("mkldnn: unsupported\nsecond line")

    monkeypatch.setattr(kernels, "ONEDNN_LINEAR", broken)
    torch.manual_seed(3)
    ffn, x = FeedForward(16, 32, "gelu"), torch.randn(4, 16)
    with torch.no_grad():
        expected = linear_reference(ffn.linear2, linear_reference(ffn.linear1, x, "gelu"), "none")
        with pytest.warns(RuntimeWarning, match=r"oneDNN's linear failed \(mkldnn: unsupported\)"):
            first = ffn(x)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            second = ffn(x)
    assert len(calls) == 1, "the failed op was called again"
    assert kernels.ONEDNN_LINEAR is None
    assert torch.equal(first, expected) and torch.equal(second, expected)


@pytest.fixture
def onednn_calls(monkeypatch) -> list[str]:
    """The activation of each call to oneDNN's linear from now on (the op still computes)."""
    calls: list[str] = []
    op = kernels.ONEDNN_LINEAR

    def counted(*args: object) -> torch.Tensor:
        calls.append(args[3])
        return op(*args)

    monkeypatch.setattr(kernels, "ONEDNN_LINEAR", counted)
    return calls


@pytest.mark.skipif(not kernels.HAS_ONEDNN, reason="this torch has no oneDNN linear")
def test_the_onednn_op_is_what_inference_runs(onednn_calls, onednn_at_every_size):
    """Where the op exists, float32 CPU inference goes through it (and training does not)."""
    layer, x = Linear(16, 24), torch.randn(3, 16)
    with torch.no_grad():
        layer(x, "silu")
    layer(x.requires_grad_(), "silu")
    assert onednn_calls == ["swish"]


@pytest.mark.skipif(not kernels.HAS_ONEDNN, reason="this torch has no oneDNN linear")
@pytest.mark.parametrize(
    ("features", "shape", "onednn"),
    [
        ((128, 512), (1, 128), False),  # a small translator's projection, one row: F.linear
        ((128, 512), (2, 8, 128), False),  # 16 rows, of a 3-D input
        ((128, 512), (3, 6, 128), True),  # 18 rows, of a 3-D input
        ((128, 512), (16, 128), False),  # SMALL_PRODUCT multiply-adds exactly
        ((128, 512), (17, 128), True),  # one row more
        ((256, 257), (1, 256), True),  # a weight past SMALL_WEIGHT, however few rows
        ((512, 512), (1, 512), True),
    ],
)
def test_small_products_take_f_linear_and_agree(features, shape, onednn, onednn_calls):
    """oneDNN's linear computes a product past ``small_product``'s bounds, F.linear one within them,
    rows counted over every leading dimension; both give what the reference gives."""
    torch.manual_seed(5)
    layer, x = Linear(*features), torch.randn(*shape)
    with torch.no_grad():
        out = layer(x, "relu")
    assert onednn_calls == (["relu"] if onednn else [])
    torch.testing.assert_close(out, linear_reference(layer, x, "relu"), atol=1e-5, rtol=1e-5)
