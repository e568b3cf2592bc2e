"""Rotary positions (``position: rope`` and ``rope_interleaved``): both layouts against the
rotation written pair by pair, the half-split layout against Hugging Face Llama's, the relative
property, fp32 angles under bf16 autocast, the growing table, and the bad inputs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.layers.positions import RotaryPositions, query_key_positions

DT = torch.float64
D_HEAD = 8


def _rotate_reference(x: Tensor, position: int, theta: float, interleaved: bool) -> Tensor:
    """One vector ``x`` (d,) at ``position``: pair i rotated by θ_i · p, θ_i = theta^(−2i/d), the
    pairs (2i, 2i+1) interleaved or (i, i + d/2) half-split, each by its own 2×2 matrix."""
    d = x.shape[-1]
    out = x.clone()
    for i in range(d // 2):
        angle = position * theta ** (-2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
        out[a] = c * x[a] - s * x[b]
        out[b] = s * x[a] + c * x[b]
    return out


def _reference(x: Tensor, ids: Tensor, theta: float, interleaved: bool) -> Tensor:
    """:func:`_rotate_reference` over (batch, heads, new, d) at ``ids`` (batch | 1, new)."""
    out = torch.empty_like(x)
    ids = ids.expand(x.shape[0], -1)
    for b in range(x.shape[0]):
        for h in range(x.shape[1]):
            for t in range(x.shape[2]):
                out[b, h, t] = _rotate_reference(x[b, h, t], int(ids[b, t]), theta, interleaved)
    return out


@pytest.mark.parametrize("interleaved", [False, True], ids=["half-split", "interleaved"])
@pytest.mark.parametrize("theta", [10000.0, 500.0])
def test_rotation_matches_the_pairwise_formula(interleaved, theta):
    torch.manual_seed(0)
    rope = RotaryPositions(D_HEAD, max_len=32, theta=theta, interleaved=interleaved)
    q, k = torch.randn(2, 3, 4, D_HEAD, dtype=DT), torch.randn(2, 3, 4, D_HEAD, dtype=DT)
    ids = torch.tensor([[0, 0, 1, 2], [5, 6, 7, 31]])  # a left-padded row, and one after a cache
    rq, rk = rope(q, k, ids, 32)
    assert rq.dtype == rk.dtype == DT
    torch.testing.assert_close(rq, _reference(q, ids, theta, interleaved), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(rk, _reference(k, ids, theta, interleaved), atol=1e-6, rtol=1e-6)


def test_the_layouts_are_one_map_with_the_features_permuted():
    """Half-split on (evens, odds) is the interleaved rotation, and the two layouts differ."""
    torch.manual_seed(1)
    x = torch.randn(1, 2, 5, D_HEAD)
    ids = torch.arange(5)[None]
    order = torch.cat([torch.arange(0, D_HEAD, 2), torch.arange(1, D_HEAD, 2)])
    half = RotaryPositions(D_HEAD, 16)(x[..., order], x[..., order], ids, 5)[0]
    inter = RotaryPositions(D_HEAD, 16, interleaved=True)(x, x, ids, 5)[0]
    torch.testing.assert_close(half, inter[..., order])
    assert not torch.allclose(RotaryPositions(D_HEAD, 16)(x, x, ids, 5)[0], inter)


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_half_split_equals_hugging_face_llama(theta):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig

    hf_config = LlamaConfig(
        hidden_size=4 * D_HEAD, num_attention_heads=4, max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": theta},
    )  # fmt: skip
    torch.manual_seed(2)
    q, k = torch.randn(2, 4, 6, D_HEAD), torch.randn(2, 4, 6, D_HEAD)
    ids = torch.tensor([[0, 0, 0, 1, 2, 3], [10, 11, 12, 13, 14, 63]])
    cos, sin = llama.LlamaRotaryEmbedding(hf_config)(q, ids)
    expected = llama.apply_rotary_pos_emb(q, k, cos, sin)
    cfg = ModelConfig(position="rope", d_model=4 * D_HEAD, n_heads=4, max_len=64, rope_theta=theta)
    ours = query_key_positions(cfg)(q, k, ids, 64)
    for a, b in zip(ours, expected, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["rope", "rope_interleaved"])
def test_scores_depend_only_on_the_distance(kind):
    """q'·k' at positions (p_q, p_k) equals q'·k' at (p_q + s, p_k + s), and changes with p_q − p_k."""
    torch.manual_seed(3)
    rope = query_key_positions(ModelConfig(position=kind, d_model=2 * D_HEAD, n_heads=2, max_len=64))
    q, k = torch.randn(1, 2, 1, D_HEAD, dtype=DT), torch.randn(1, 2, 1, D_HEAD, dtype=DT)

    def score(pq: int, pk: int) -> Tensor:
        rq = rope(q, k, torch.tensor([[pq]]), 64)[0]
        rk = rope(q, k, torch.tensor([[pk]]), 64)[1]
        return (rq * rk).sum(-1)

    for pq, pk in [(3, 1), (1, 3), (7, 7)]:
        for shift in (1, 9, 40):
            torch.testing.assert_close(score(pq + shift, pk + shift), score(pq, pk), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(score(3, 1), score(3, 2))


@pytest.mark.parametrize("interleaved", [False, True])
def test_bf16_autocast_rotates_with_fp32_angles(interleaved):
    """Under bf16 autocast the inputs are bf16: the table stays fp32 and the result is the fp32
    rotation of the same inputs, rounded once to bf16 (bf16 angles would be off by up to a radian
    at these positions)."""
    torch.manual_seed(4)
    rope = RotaryPositions(D_HEAD, 512, interleaved=interleaved)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q = torch.nn.functional.linear(torch.randn(1, 2, 6, D_HEAD), torch.eye(D_HEAD))
        ids = torch.tensor([[3, 100, 301, 402, 450, 511]])
        rq, rk = rope(q, q, ids, 512)
    assert q.dtype == rq.dtype == rk.dtype == torch.bfloat16
    cos, sin = rope.table(512, q.device)
    assert cos.dtype == sin.dtype == torch.float32
    exact = RotaryPositions(D_HEAD, 512, interleaved=interleaved)(q.double(), q.double(), ids, 512)[0]
    torch.testing.assert_close(rq.double(), exact, atol=1e-2, rtol=2**-8)
    in_bf16 = ids[..., None].bfloat16() * rope.theta ** (-torch.arange(0, D_HEAD, 2) / D_HEAD).bfloat16()
    assert (in_bf16.double().cos() - cos[ids]).abs().max() > 0.1  # what fp32 angles avoid


def test_the_table_grows_when_an_id_needs_it_and_follows_the_device():
    rope = RotaryPositions(D_HEAD, max_len=8)
    cos, _ = rope.table(4, torch.device("cpu"))
    assert cos.shape == (8, D_HEAD // 2)
    assert rope.table(8, torch.device("cpu"))[0] is cos  # kept, not rebuilt
    grown, _ = rope.table(9, torch.device("cpu"))
    assert grown.shape == (16, D_HEAD // 2)
    torch.testing.assert_close(grown[:8], cos)
    x = torch.randn(1, 1, 1, D_HEAD, dtype=DT)
    far = rope(x, x, torch.tensor([[40]]), 41)[0]
    torch.testing.assert_close(far, _reference(x, torch.tensor([[40]]), 10000.0, False), atol=1e-6, rtol=0)
    assert rope.table(1, torch.device("cpu"))[0].shape[0] >= 41
    assert not any(True for _ in rope.state_dict())  # nothing in a checkpoint


@pytest.mark.parametrize("kind", ["rope", "rope_interleaved"])
def test_an_odd_head_dimension_is_refused_naming_the_field(kind):
    with pytest.raises(ConfigError, match=r"'model\.position'.*even head dimension.*36 / 4 = 9"):
        ModelConfig(position=kind, d_model=36, n_heads=4)
    ModelConfig(position="sinusoidal", d_model=36, n_heads=4)  # only rotary needs pairs


@pytest.mark.parametrize("theta", [0.0, -1.0, float("nan")])
def test_rope_theta_must_be_positive(theta):
    with pytest.raises(ConfigError, match=r"'model\.rope_theta': must be > 0"):
        ModelConfig(position="rope", rope_theta=theta)
