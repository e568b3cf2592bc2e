"""MultiHeadAttention: agreement with torch.nn.MultiheadAttention, fast path = explicit path,
truncated (windowed) attention = full attention under an explicit band mask, empty rows, and both
paths under any generated padding (Hypothesis). The masks themselves: test_masks.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tests.helpers import defined_mask
from vaswani.layers.attention import KVCache, MultiHeadAttention
from vaswani.layers.masks import (
    causal_mask,
    combine,
    from_key_padding_mask,
    padding_mask,
)
from vaswani.layers.positions import RelativePositions

D_MODEL, N_HEADS = 16, 4
DT = torch.float64


def _copy_from_torch(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    """Give ``ours`` the weights of ``ref`` (fused or separate projections, self or cross)."""
    w, b = ref.in_proj_weight, ref.in_proj_bias
    d = w.shape[1]
    with torch.no_grad():
        if ours.fused and not ours.cross:
            ours.qkv_proj.weight.copy_(w)
            ours.qkv_proj.bias.copy_(b)
        elif ours.fused:
            ours.q_proj.weight.copy_(w[:d])
            ours.q_proj.bias.copy_(b[:d])
            ours.kv_proj.weight.copy_(w[d:])
            ours.kv_proj.bias.copy_(b[d:])
        else:
            for i, proj in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
                proj.weight.copy_(w[i * d : (i + 1) * d])
                proj.bias.copy_(b[i * d : (i + 1) * d])
        ours.out_proj.weight.copy_(ref.out_proj.weight)
        ours.out_proj.bias.copy_(ref.out_proj.bias)


def _pair(fused: bool, cross: bool = False, causal: bool = False):
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True).to(DT).eval()
    with torch.no_grad():  # non-zero biases so that a wrong bias copy or slice shows
        ref.in_proj_bias.normal_()
        ref.out_proj.bias.normal_()
    ours = MultiHeadAttention(D_MODEL, N_HEADS, fused=fused, cross=cross, causal=causal).to(DT).eval()
    _copy_from_torch(ours, ref)
    return ours, ref


def _assert_close(a, b, atol=1e-10):
    torch.testing.assert_close(a, b, atol=atol, rtol=1e-8)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_self_attention_matches_torch(fused, padded):
    ours, ref = _pair(fused)
    x = torch.randn(3, 6, D_MODEL, dtype=DT)
    kpm = torch.zeros(3, 6, dtype=torch.bool)
    if padded:
        kpm[1, 4:] = True
        kpm[2, 2:] = True
    mask = from_key_padding_mask(kpm) if padded else None
    expected, expected_w = ref(x, x, x, key_padding_mask=kpm if padded else None, average_attn_weights=False)
    out, _ = ours(x, mask=mask)
    out_w, weights = ours(x, mask=mask, need_weights=True)
    _assert_close(out, expected)
    _assert_close(out_w, expected)
    assert weights.shape == (3, N_HEADS, 6, 6)
    _assert_close(weights, expected_w)
    if padded:  # the padded keys get exactly zero weight
        assert (weights[1, :, :, 4:] == 0).all()


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_causal_self_attention_matches_torch(fused, padded):
    ours, ref = _pair(fused, causal=True)
    x = torch.randn(2, 7, D_MODEL, dtype=DT)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[1, 5:] = True
    attn_mask = ~causal_mask(7)[0, 0]  # torch: True = may NOT attend
    expected, expected_w = ref(
        x, x, x, attn_mask=attn_mask, key_padding_mask=kpm if padded else None, average_attn_weights=False
    )
    mask = from_key_padding_mask(kpm) if padded else None
    out, _ = ours(x, mask=mask)
    out_w, weights = ours(x, mask=mask, need_weights=True)
    _assert_close(out, expected)
    _assert_close(out_w, expected)
    _assert_close(weights, expected_w)
    assert (weights.triu(diagonal=1) == 0).all()


@pytest.mark.parametrize("fused", [False, True])
def test_cross_attention_matches_torch(fused):
    ours, ref = _pair(fused, cross=True)
    x = torch.randn(3, 4, D_MODEL, dtype=DT)
    memory = torch.randn(3, 9, D_MODEL, dtype=DT)
    kpm = torch.zeros(3, 9, dtype=torch.bool)
    kpm[0, 6:] = True
    kpm[2, 1:] = True
    expected, expected_w = ref(x, memory, memory, key_padding_mask=kpm, average_attn_weights=False)
    mask = from_key_padding_mask(kpm)
    out, _ = ours(x, memory=memory, mask=mask)
    out_w, weights = ours(x, memory=memory, mask=mask, need_weights=True)
    assert out.shape == (3, 4, D_MODEL)
    _assert_close(out, expected)
    _assert_close(out_w, expected)
    assert weights.shape == (3, N_HEADS, 4, 9)
    _assert_close(weights, expected_w)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("fused", [False, True])
def test_memory_rows_shared_by_consecutive_query_rows(fused, need_weights):
    """Beam search keeps one memory row per source for its hypotheses: the result must be that of
    the memory (and its padding mask, one empty row included) repeated for every row of ``x``."""
    ours, _ = _pair(fused, cross=True)
    group = 3
    x = torch.randn(2 * group, 4, D_MODEL, dtype=DT)
    memory = torch.randn(2, 7, D_MODEL, dtype=DT)
    kpm = torch.zeros(2, 7, dtype=torch.bool)
    kpm[0, 5:] = True
    kpm[1, :] = True
    mask = from_key_padding_mask(kpm)
    out, weights = ours(x, memory=memory, mask=mask, need_weights=need_weights)
    expanded = ours(
        x, memory=memory.repeat_interleave(group, 0), mask=mask.repeat_interleave(group, 0),
        need_weights=need_weights,
    )  # fmt: skip
    _assert_close(out, expanded[0])
    if need_weights:
        _assert_close(weights, expanded[1])
    with pytest.raises(ValueError, match="cannot share"):
        ours(x[:5], memory=memory, mask=mask)


@pytest.mark.parametrize("fused", [False, True])
def test_cross_attention_cache_is_filled_once_and_reused(fused):
    ours, _ = _pair(fused, cross=True)
    x = torch.randn(2, 3, D_MODEL, dtype=DT)
    memory = torch.randn(2, 5, D_MODEL, dtype=DT)
    full, _ = ours(x, memory=memory)
    cache = KVCache()
    steps = [ours(x[:, t : t + 1], memory=memory, cache=cache)[0] for t in range(3)]
    assert cache.length == 5  # the memory's keys, not one per step
    _assert_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("window", [None, 1, 3])
def test_self_attention_kv_cache_matches_full(fused, window):
    torch.manual_seed(1)
    attn = MultiHeadAttention(D_MODEL, N_HEADS, fused=fused, causal=True, window=window).to(DT).eval()
    x = torch.randn(2, 7, D_MODEL, dtype=DT)
    full, _ = attn(x)
    cache = KVCache()
    first, _ = attn(x[:, :3], cache=cache)  # a prompt of 3, then one token at a time
    steps = [first] + [attn(x[:, t : t + 1], cache=cache)[0] for t in range(3, 7)]
    assert cache.length == 7
    _assert_close(torch.cat(steps, dim=1), full)


def _random_masks(batch, q_len, k_len, generator):
    """Random boolean may-attend masks of the shapes attention accepts, some rows fully masked."""
    per_head = torch.rand(batch, N_HEADS, q_len, k_len, generator=generator) > 0.5
    per_head[0, 1, 2] = False  # one query that may attend nothing
    shared = torch.rand(batch, 1, q_len, k_len, generator=generator) > 0.4
    lengths = torch.randint(1, k_len + 1, (batch,), generator=generator)
    tokens = torch.where(torch.arange(k_len)[None, :] < lengths[:, None], 5, 0)
    tokens[-1] = 0  # an all-padding row
    return [None, per_head, shared, padding_mask(tokens, 0)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, 1, 2])
@pytest.mark.parametrize("fused", [False, True])
def test_fast_path_equals_explicit_path(causal, window, fused):
    gen = torch.Generator().manual_seed(3)
    torch.manual_seed(3)
    attn = MultiHeadAttention(D_MODEL, N_HEADS, fused=fused, causal=causal, window=window).to(DT).eval()
    x = torch.randn(3, 6, D_MODEL, dtype=DT)
    for mask in _random_masks(3, 6, 6, gen):
        fast, none = attn(x, mask=mask)
        explicit, weights = attn(x, mask=mask, need_weights=True)
        assert none is None
        assert torch.isfinite(fast).all() and torch.isfinite(weights).all()
        _assert_close(fast, explicit)


@pytest.mark.parametrize("fused", [False, True])
def test_fast_path_equals_explicit_path_cross(fused):
    gen = torch.Generator().manual_seed(4)
    torch.manual_seed(4)
    attn = MultiHeadAttention(D_MODEL, N_HEADS, fused=fused, cross=True).to(DT).eval()
    x = torch.randn(3, 4, D_MODEL, dtype=DT)
    memory = torch.randn(3, 7, D_MODEL, dtype=DT)
    for mask in _random_masks(3, 4, 7, gen):
        fast, _ = attn(x, memory=memory, mask=mask)
        explicit, _ = attn(x, memory=memory, mask=mask, need_weights=True)
        _assert_close(fast, explicit)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_empty_rows_give_zero_context_not_nan(need_weights, causal):
    """A query with no key to attend (e.g. an all-padding source) yields exactly the output bias."""
    torch.manual_seed(5)
    attn = MultiHeadAttention(D_MODEL, N_HEADS, causal=causal).to(DT).eval()
    x = torch.randn(2, 5, D_MODEL, dtype=DT)
    tokens = torch.tensor([[4, 4, 4, 0, 0], [0, 0, 0, 0, 0]])
    out, weights = attn(x, mask=padding_mask(tokens, 0), need_weights=need_weights)
    assert torch.isfinite(out).all()
    _assert_close(out[1], attn.out_proj.bias.expand(5, D_MODEL))
    if need_weights:
        assert torch.isfinite(weights).all()
    # Rows that do have keys are unaffected by the all-padding row being in the batch.
    alone, _ = attn(x[:1], mask=padding_mask(tokens[:1], 0), need_weights=need_weights)
    _assert_close(out[:1], alone)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 2, 4])
@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_window_equals_full_attention_with_band_mask(causal, window, need_weights, padded):
    torch.manual_seed(6)
    windowed = MultiHeadAttention(D_MODEL, N_HEADS, causal=causal, window=window).to(DT).eval()
    full = MultiHeadAttention(D_MODEL, N_HEADS).to(DT).eval()
    full.load_state_dict(windowed.state_dict())
    x = torch.randn(2, 8, D_MODEL, dtype=DT)
    pad = padding_mask(torch.tensor([[3] * 8, [3] * 5 + [0] * 3]), 0) if padded else None
    band = defined_mask(8, 8, causal, window)
    out, w = windowed(x, mask=pad, need_weights=need_weights)
    expected, expected_w = full(x, mask=combine(pad, band), need_weights=need_weights)
    _assert_close(out, expected)
    if need_weights:
        _assert_close(w, expected_w)
        allowed = combine(pad, band).expand_as(w)
        has_key = allowed.any(dim=-1, keepdim=True)  # rows with no key at all are tested elsewhere
        assert (w.masked_select(~allowed & has_key) == 0).all()
    # And the window really restricts: it differs from unrestricted attention.
    unrestricted, _ = full(x, mask=combine(pad, causal_mask(8) if causal else None))
    assert not torch.allclose(out, unrestricted)


# ---------------------------------------------------------------------------------------------
# Generated cases (Hypothesis): both paths under any padding


CASE_D_MODEL, CASE_N_HEADS = 8, 2


@st.composite
def attention_cases(draw: st.DrawFn) -> dict:
    cross = draw(st.booleans())
    q_len = draw(st.integers(1, 7))
    k_len = draw(st.integers(1, 7)) if cross else q_len
    batch = draw(st.integers(1, 3))
    return {
        "cross": cross,
        "causal": not cross and draw(st.booleans()),
        "window": None if cross else draw(st.none() | st.integers(1, 4)),
        "relative": not cross and draw(st.booleans()),
        "fused": draw(st.booleans()),
        "q_len": q_len,
        # None: no mask at all; 0: a row with no key to attend
        "lengths": draw(st.none() | st.lists(st.integers(0, k_len), min_size=batch, max_size=batch)),
        "batch": batch,
        "k_len": k_len,
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=150, deadline=None)
@given(case=attention_cases())
def test_attention_paths_agree_under_any_padding_and_ignore_its_content(case):
    torch.manual_seed(case["seed"])
    relative = RelativePositions(CASE_D_MODEL // CASE_N_HEADS, clip=3) if case["relative"] else None
    attn = MultiHeadAttention(
        CASE_D_MODEL, CASE_N_HEADS, fused=case["fused"], cross=case["cross"], causal=case["causal"],
        window=case["window"], relative=relative,
    ).to(torch.float64).eval()  # fmt: skip
    batch, q_len, k_len = case["batch"], case["q_len"], case["k_len"]
    lengths = torch.tensor(case["lengths"] or [k_len] * batch)
    real = torch.arange(k_len)[None, :] < lengths[:, None]  # (batch, k_len)
    mask = None if case["lengths"] is None else padding_mask(torch.where(real, 5, 0), 0)
    x = torch.randn(batch, q_len, CASE_D_MODEL, dtype=torch.float64)
    source = torch.randn(batch, k_len, CASE_D_MODEL, dtype=torch.float64)

    def both_paths(x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        memory = source if case["cross"] else None
        fast, _ = attn(x if case["cross"] else source, memory=memory, mask=mask)
        explicit, weights = attn(x if case["cross"] else source, memory=memory, mask=mask, need_weights=True)
        assert torch.isfinite(fast).all() and torch.isfinite(explicit).all() and torch.isfinite(weights).all()
        torch.testing.assert_close(fast, explicit, atol=1e-10, rtol=1e-8)
        return fast

    out = both_paths(x, source)
    noise = 100 * torch.randn_like(source)
    other = both_paths(x, torch.where(real[..., None], source, noise))
    # Real queries: every query of cross-attention; the real positions of self-attention.
    queries = torch.ones(batch, q_len, dtype=torch.bool) if case["cross"] else real
    torch.testing.assert_close(out[queries], other[queries], atol=1e-10, rtol=1e-8)
