"""ALiBi (``position: alibi``): the slopes against the paper's reference recipe and its published
values, the bias against a direct formula (causal, bidirectional, with the KV cache, a window
and a left-padded row), SDPA = the explicit path."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from tests.helpers import defined_mask
from vaswani.config import ModelConfig
from vaswani.layers.attention import KVCache, MultiHeadAttention
from vaswani.layers.positions import ALiBiPositions, alibi_slopes, embedding_positions, score_positions

DT = torch.float64
D_MODEL, N_HEADS = 24, 6


def recipe_slopes(n: int) -> list[float]:
    """The slopes as the ALiBi authors' reference code computes them
    (ofirpress/attention_with_linear_biases, ``get_slopes``)."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + recipe_slopes(2 * closest)[0::2][: n - closest]


def test_slopes_of_eight_heads_are_the_papers():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-h for h in range(1, 9)], dtype=DT))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7, 12, 16, 20, 24, 32, 33])
def test_slopes_follow_the_reference_recipe_for_any_head_count(n):
    torch.testing.assert_close(alibi_slopes(n), torch.tensor(recipe_slopes(n), dtype=DT), rtol=1e-12, atol=0)


def test_slopes_of_six_and_twelve_heads():
    """6 heads: the 4 of 4 heads (2^-2, 2^-4, 2^-6, 2^-8), then 2^-1, 2^-3 of 8 heads. 12: the 8 of
    8 heads, then the odd ones of 16 heads, 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5."""
    six = [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]
    twelve = [2.0**-h for h in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5]
    torch.testing.assert_close(alibi_slopes(6), torch.tensor(six, dtype=DT))
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(twelve, dtype=DT))
    assert recipe_slopes(12) == pytest.approx(twelve, rel=1e-12)


def test_alibi_adds_no_position_embedding():
    cfg = ModelConfig(position="alibi", d_model=D_MODEL, n_heads=N_HEADS)
    assert embedding_positions(cfg) is None
    alibi = score_positions(cfg)
    assert isinstance(alibi, ALiBiPositions) and not list(alibi.state_dict())


def _attention(causal: bool = True, window: int | None = None) -> MultiHeadAttention:
    torch.manual_seed(5)
    alibi = score_positions(ModelConfig(position="alibi", d_model=D_MODEL, n_heads=N_HEADS))
    attn = MultiHeadAttention(D_MODEL, N_HEADS, causal=causal, window=window, relative=alibi)
    return attn.to(DT).eval()


def _naive(attn: MultiHeadAttention, x: Tensor, allowed: Tensor, ids: list[int]) -> Tensor:
    """softmax(q_i · k_j / sqrt(d) − m_h |p_i − p_j|) v, pair by pair, over the ``allowed`` keys
    (q_len, k_len); ``ids`` are the position ids of the keys, the queries the last of them."""
    b, t, _ = x.shape
    d = D_MODEL // N_HEADS
    q, k, v = (p(x).view(b, t, N_HEADS, d).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    slopes = recipe_slopes(N_HEADS)
    out = torch.zeros_like(q)
    for h in range(N_HEADS):
        for i in range(t):
            scores = torch.full((t,), float("-inf"), dtype=DT)
            for j in range(t):
                if allowed[i, j]:
                    bias = -slopes[h] * abs(ids[i] - ids[j])
                    scores[j] = q[0, h, i] @ k[0, h, j] / math.sqrt(d) + bias
            out[0, h, i] = scores.softmax(-1) @ v[0, h]
    return attn.out_proj(out.transpose(1, 2).reshape(b, t, D_MODEL))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("need_weights", [False, True], ids=["sdpa", "explicit"])
def test_bias_matches_the_direct_formula(causal, window, need_weights):
    attn = _attention(causal, window)
    x = torch.randn(1, 7, D_MODEL, dtype=DT)
    out, _ = attn(x, need_weights=need_weights)
    allowed = defined_mask(7, 7, causal, window)[0, 0]
    torch.testing.assert_close(out, _naive(attn, x, allowed, list(range(7))))


def test_bias_takes_the_distances_from_the_position_ids():
    """A left-padded row's ids (the padding masked away) give the same outputs as the row alone."""
    attn = _attention()
    x = torch.randn(1, 6, D_MODEL, dtype=DT)
    ids = [0, 0, 0, 1, 2, 3]
    mask = torch.tensor([False, False, True, True, True, True])[None, None, None]
    padded, _ = attn(x, mask=mask, positions=torch.tensor([ids]))
    alone, _ = attn(x[:, 2:])
    torch.testing.assert_close(padded[:, 2:], alone)
    allowed = defined_mask(6, 6, True, None)[0, 0] & mask[0, 0]
    allowed[:2, 0] = True  # the padding queries (outputs zeroed by attention, not compared)
    torch.testing.assert_close(padded[:, 2:], _naive(attn, x, allowed, ids)[:, 2:])


@pytest.mark.parametrize("window", [None, 3])
def test_bias_with_the_kv_cache_offsets_the_queries(window):
    attn = _attention(window=window)
    x = torch.randn(2, 9, D_MODEL, dtype=DT)
    full, _ = attn(x)
    cache = KVCache()
    steps = [attn(x[:, :4], cache=cache)[0]]
    steps += [attn(x[:, t : t + 1], cache=cache)[0] for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert not torch.allclose(attn(x[:, 8:9])[0], full[:, 8:9])  # the distance matters


def test_bias_against_the_formula_and_its_shape():
    alibi = ALiBiPositions(4)
    bias = alibi.bias(torch.tensor([[5, 6]]), torch.arange(7)[None])
    assert bias.shape == (1, 4, 2, 7) and bias.dtype == torch.float32
    slopes = recipe_slopes(4)
    expected = [[[-slopes[h] * abs(i - j) for j in range(7)] for i in (5, 6)] for h in range(4)]
    torch.testing.assert_close(bias[0], torch.tensor(expected, dtype=torch.float32))
