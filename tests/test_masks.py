"""The attention masks of ``layers/masks.py`` against their definition: the causal mask (with the
offset of cached keys), the window's band and ``combine``, on chosen and on generated shapes
(Hypothesis)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import defined_mask
from vaswani.layers.masks import causal_mask, combine, self_attention_mask, window_mask


@pytest.mark.parametrize("q_len,k_len", [(6, 6), (1, 6), (3, 8)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 2, 5])
def test_window_mask_is_the_band(q_len, k_len, causal, window):
    assert torch.equal(
        window_mask(q_len, window, k_len, causal=causal), defined_mask(q_len, k_len, causal, window)
    )
    assert torch.equal(
        self_attention_mask(q_len, k_len, causal, window), defined_mask(q_len, k_len, causal, window)
    )


def test_causal_mask_with_offset():
    for q_len, k_len in [(5, 5), (1, 5), (2, 6)]:
        expected = defined_mask(q_len, k_len, True, k_len)  # a window as long as the sequence
        assert torch.equal(causal_mask(q_len, k_len), expected)
    assert self_attention_mask(4, 4, causal=False, window=None) is None


@pytest.mark.parametrize("window", [0, -1, -3])
def test_window_mask_refuses_non_positive_window(window):
    with pytest.raises(ValueError, match="window"):
        window_mask(4, window)


def test_combine_is_logical_and():
    a = torch.tensor([[True, False, True]])
    b = torch.tensor([[True, True, False]])
    assert combine() is None
    assert combine(None, None) is None
    assert torch.equal(combine(a, None), a)
    assert torch.equal(combine(a, b), a & b)


@settings(max_examples=300, deadline=None)
@given(
    q_len=st.integers(1, 12),
    cached=st.integers(0, 8),
    causal=st.booleans(),
    window=st.none() | st.integers(1, 14),
)
def test_masks_agree_with_their_definition(q_len, cached, causal, window):
    k_len = q_len + cached
    assert torch.equal(causal_mask(q_len, k_len), defined_mask(q_len, k_len, True, None))
    expected = defined_mask(q_len, k_len, causal, window)
    if window is not None:
        assert torch.equal(window_mask(q_len, window, k_len, causal=causal), expected)
    mask = self_attention_mask(q_len, k_len, causal, window)
    assert bool(expected.all()) if mask is None else torch.equal(mask, expected)
