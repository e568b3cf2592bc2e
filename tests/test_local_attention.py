"""Local attention in blocks (vaswani.layers.local) against the dense masked path of its definition
(masks.window_mask): forward and backward at the edges of the blocks, with padding, causal and
bidirectional, relative positions, ALiBi and grouped-query heads; dropout; whole models."""

from __future__ import annotations

import math

import pytest
import torch

import vaswani.layers.attention as attention_module
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.layers.attention import MultiHeadAttention
from vaswani.layers.local import MIN_BLOCK, blocks_for, local_attention, span_windows
from vaswani.layers.masks import window_mask
from vaswani.layers.positions import ALiBiPositions, RelativePositions, positions_from_mask
from vaswani.models.bert import Bert
from vaswani.models.gpt import GPT

HEADS, D_HEAD = 4, 8
# (length, window): L < w, L = w, L = 2w + 1 in one block and in several, L a multiple of the
# block and not
SHAPES = [(3, 5), (5, 5), (11, 5), (70, 5), (40, 40), (80, 40), (81, 40), (100, 33)]
KINDS = ["plain", "padded", "gqa", "alibi", "relative"]


def reference(q, k, v, window, causal, mask, positions, scores):
    """The dense definition: softmax over the keys that window_mask and the key mask allow."""
    k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], dim=1) for x in (k, v))
    length = q.shape[2]
    logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    bucket = None
    if isinstance(scores, ALiBiPositions):
        logits = logits + scores.bias(positions, positions)
    if isinstance(scores, RelativePositions):
        bucket = scores.bucket(positions[:, None], positions[:, None])
        logits = logits + scores.key_scores(q, bucket) / math.sqrt(q.shape[-1])
    allowed = window_mask(length, window, causal=causal)
    if mask is not None:
        allowed = allowed & mask
    has_key = allowed.any(dim=-1, keepdim=True)
    weights = logits.masked_fill(~allowed, -math.inf).softmax(dim=-1).nan_to_num() * has_key
    out = weights @ v
    if bucket is not None:
        out = out + scores.value_term(weights, bucket)
    return out


def inputs(kind: str, length: int, causal: bool, seed: int = 0, batch: int = 3):
    """q, k, v (requiring gradients), the key mask, the position ids and the score positions of a
    case: ``padded`` has a right-padded row (left-padded when causal) and a fully padded one
    (rows 1 and 2; row 0 padded when ``batch`` is 1)."""
    torch.manual_seed(seed)
    kv_heads = 2 if kind == "gqa" else HEADS
    q = torch.randn(batch, HEADS, length, D_HEAD, requires_grad=True)
    k = torch.randn(batch, kv_heads, length, D_HEAD, requires_grad=True)
    v = torch.randn(batch, kv_heads, length, D_HEAD, requires_grad=True)
    real = torch.ones(batch, length, dtype=torch.bool)
    if kind in ("padded", "alibi", "relative"):
        cut, row = max(1, length // 3), min(1, batch - 1)
        if causal:
            real[row, :cut] = False
        else:
            real[row, length - cut :] = False
        real[2:3] = False
    mask = None if kind in ("plain", "gqa") else real[:, None, None, :]
    positions = positions_from_mask(real) if mask is not None else torch.arange(length)[None]
    scores = None
    if kind == "alibi":
        scores = ALiBiPositions(HEADS)
    elif kind == "relative":
        scores = RelativePositions(D_HEAD, clip=3)
        with torch.no_grad():
            scores.keys.weight.normal_()
            scores.values.weight.normal_()
    return q, k, v, mask, positions, scores


def gradients(out, tensors, seed: int = 1):
    """The gradients of a random projection of ``out`` with respect to ``tensors``."""
    torch.manual_seed(seed)
    return torch.autograd.grad((out * torch.randn(out.shape)).sum(), tensors)


@pytest.mark.parametrize("explicit", [False, True], ids=["sdpa", "explicit"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("length,window", SHAPES)
def test_blocks_equal_the_dense_window(length, window, causal, kind, explicit):
    q, k, v, mask, positions, scores = inputs(kind, length, causal)
    params = [] if scores is None else list(scores.parameters())
    tensors = [q, k, v, *params]
    expected = reference(q, k, v, window, causal, mask, positions, scores)
    got = local_attention(q, k, v, window, causal, mask, 0.0, positions, scores, explicit)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(gradients(got, tensors), gradients(expected, tensors), strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)
    if mask is not None:  # the fully padded row: zeros, and no gradient through it
        assert torch.equal(got[2], torch.zeros_like(got[2]))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("length,window", [(3, 5), (40, 40), (100, 33), (192, 20), (200, 20), (300, 7)])
def test_spans_cut_the_blocks_at_the_edges_of_the_sequence(length, window, causal):
    """The spans cover every block once, in order; the inner blocks' windows lie inside the
    sequence, the edges' do not (both, when no block is inner)."""
    blocks = blocks_for(length, window, causal)
    assert [n for span in blocks.spans for n in span] == list(range(blocks.count))
    assert blocks.back <= 1 and blocks.ahead <= 1  # b >= w: one block before, one after at most
    for n in range(blocks.count):
        start, stop = (n - blocks.back) * blocks.size, (n + 1 + blocks.ahead) * blocks.size
        assert (n in blocks.inner) == (start >= 0 and stop <= length)
    if blocks.inner:
        assert blocks.inner in blocks.spans
    else:
        assert blocks.spans == [range(blocks.count)]


@pytest.mark.parametrize("kind", ["plain", "padded", "gqa", "alibi"])
@pytest.mark.parametrize("batch", [1, 2, 9], ids=["one-row", "per-row", "per-block"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("length", [192, 200], ids=["whole-blocks", "partial-block"])
def test_inner_blocks_one_call_per_row_or_per_block_equal_the_dense_window(length, causal, batch, kind):
    """w = 20 (blocks of 32, 4 or 5 inner ones): one SDPA call for a single row, one per row for
    2 rows, one per block for 9; forward and backward equal the dense definition."""
    q, k, v, mask, positions, scores = inputs(kind, length, causal, seed=2, batch=batch)
    expected = reference(q, k, v, 20, causal, mask, positions, scores)
    got = local_attention(q, k, v, 20, causal, mask, 0.0, positions, scores)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    for g, e in zip(gradients(got, (q, k, v)), gradients(expected, (q, k, v)), strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_inner_windows_are_views_and_backward_keeps_no_copy_of_the_keys(causal):
    """The heads of one projection (batch, L, 3 · d_model), as the layer makes them: autograd keeps
    that projection, the output and small tensors (the edges' copies, the band, the log-sum-exp),
    no copy of the keys or values (each as large as k) and no mask per block (half of k here)."""
    torch.manual_seed(0)
    batch, length, window, d_head = 2, 4096, 32, 64
    projected = torch.randn(batch, length, 3 * HEADS * d_head, requires_grad=True)
    q, k, v = (x.unflatten(-1, (HEADS, d_head)).transpose(1, 2) for x in projected.chunk(3, dim=-1))
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = local_attention(q, k, v, window, causal)
    storages.pop(projected.untyped_storage().data_ptr())
    k_bytes = k.numel() * k.element_size()
    assert sum(storages.values()) < k_bytes + k_bytes / 4  # the output (as large as k) and a little
    torch.testing.assert_close(
        out, reference(q, k, v, window, causal, None, None, None), atol=1e-5, rtol=1e-5
    )


def test_span_windows_read_the_sequence_or_fill():
    """The windows of a span equal those of the sequence padded with ``fill`` on both sides; views
    of it (same storage) for the inner blocks."""
    blocks = blocks_for(200, 20, causal=False)
    x = torch.arange(200.0)[None]
    padded = torch.nn.functional.pad(x, (32, 32 + blocks.count * blocks.size - 200), value=-1.0)
    every = padded.unfold(1, blocks.keys, blocks.size)
    for span in blocks.spans:
        got = span_windows(x, blocks, span, fill=-1.0)
        assert torch.equal(got, every[:, span.start : span.stop])
        assert (got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == (span == blocks.inner)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("length,window", [(9, 3), (70, 5), (100, 40)])
def test_key_at_distance_w_is_attended_and_w_plus_1_is_not(length, window, causal):
    """Zero queries weigh their allowed keys alike; one-hot values then show which were attended."""
    q = torch.zeros(1, 1, length, length)
    k = torch.randn(1, 1, length, length)
    v = torch.eye(length)[None, None]
    attended = local_attention(q, k, v, window, causal)[0, 0] > 0
    i, j = torch.arange(length)[:, None], torch.arange(length)[None]
    assert attended[(i - j) == window].all()
    assert not attended[(i - j).abs() == window + 1].any()
    assert not causal or not attended[j > i].any()
    assert torch.equal(attended, window_mask(length, window, causal=causal)[0, 0])


def test_blocks_follow_the_window():
    """b = w (at least MIN_BLOCK, at most L); a block reaches back (and ahead) as far as w does."""
    assert blocks_for(1000, 128, causal=True) == blocks_for(1000, 128, True).__class__(1000, 128, 8, 1, 0)
    short = blocks_for(10, 128, causal=False)
    assert (short.size, short.count, short.back, short.ahead) == (10, 1, 0, 0)
    small = blocks_for(100, 4, causal=False)
    assert (small.size, small.count, small.back, small.ahead, small.keys) == (MIN_BLOCK, 4, 1, 1, 96)


@pytest.mark.parametrize("explicit", [False, True], ids=["sdpa", "explicit"])
def test_dropout_keeps_the_expected_output(explicit):
    """Inverted dropout on the weights: averaged over many rows, the output is the one without it,
    while single rows differ from it."""
    torch.manual_seed(0)
    length, window, rows = 40, 6, 3000
    q, k, v = (torch.randn(1, 2, length, D_HEAD).expand(rows, -1, -1, -1) for _ in range(3))
    clean = local_attention(q[:1], k[:1], v[:1], window, True, explicit=explicit)
    dropped = local_attention(q, k, v, window, True, dropout=0.3, explicit=explicit)
    assert not torch.allclose(dropped[0], clean[0], atol=1e-3)
    torch.testing.assert_close(dropped.mean(dim=0), clean[0], atol=0.06, rtol=0)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_layer_takes_blocks_and_equals_its_dense_path(causal):
    """MultiHeadAttention with a window: the banded output equals its dense path (the one that
    returns the weights), relative positions included."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(32, 4, causal=causal, window=7, relative=RelativePositions(8, 3)).eval()
    x = torch.randn(2, 75, 32)
    mask = torch.ones(2, 1, 1, 75, dtype=torch.bool)
    mask[1, ..., 60:] = False
    banded, none = layer(x, mask=mask)
    dense, weights = layer(x, mask=mask, need_weights=True)
    assert none is None and weights is not None
    torch.testing.assert_close(banded, dense, atol=1e-5, rtol=1e-5)


def _dense_and_banded(model, run, monkeypatch):
    """``run(model)``'s output and parameter gradients through the banded path and through the
    dense masked one, checking that the banded path was taken."""
    calls = []
    banded = attention_module.local_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return banded(*args, **kwargs)

    results = []
    for dense in (False, True):
        with monkeypatch.context() as patch:
            patch.setattr(attention_module, "local_attention", counted)
            if dense:
                patch.setattr(attention_module, "is_key_mask", lambda mask, length: False)
            model.zero_grad()
            out = run(model)
            torch.manual_seed(5)
            (out * torch.randn(out.shape)).sum().backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            results.append((out.detach(), grads))
        if not dense:
            assert calls, "the banded path was not taken"
    return results


def _assert_same(results):
    (out_b, grads_b), (out_d, grads_d) = results
    torch.testing.assert_close(out_b, out_d, atol=1e-5, rtol=1e-5)
    assert grads_b.keys() == grads_d.keys() and any("attn" in name for name in grads_b)
    for name, grad in grads_b.items():
        torch.testing.assert_close(grad, grads_d[name], atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("position", ["learned", "relative", "alibi", "rope"])
def test_gpt_logits_and_gradients_through_blocks(position, monkeypatch):
    cfg = ModelConfig(
        arch="decoder_only", tgt_vocab_size=30, d_model=32, n_heads=4, n_kv_heads=2, d_ff=64,
        n_decoder_layers=2, dropout=0.0, norm="pre_ln", position=position, max_len=128, rel_clip=4,
        attn_window=9, tie_embeddings="none",
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT(cfg)
    tokens = torch.randint(1, 30, (2, 77))
    real = torch.ones(2, 77, dtype=torch.bool)
    real[1, :20] = False  # a left-padded row
    _assert_same(_dense_and_banded(model, lambda m: m(tokens, real), monkeypatch))


@pytest.mark.parametrize("position", ["learned", "relative", "alibi"])
def test_bert_hidden_states_and_gradients_through_blocks(position, monkeypatch):
    cfg = ModelConfig.preset(
        "bert-base", src_vocab_size=30, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
        max_len=128, dropout=0.0, attn_dropout=0.0, attn_window=6, position=position, rel_clip=4,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Bert(cfg)
    tokens = torch.randint(1, 30, (2, 90))
    real = torch.ones(2, 90, dtype=torch.bool)
    real[1, 50:] = False  # a right-padded row
    _assert_same(_dense_and_banded(model, lambda m: m(tokens, attention_mask=real), monkeypatch))


@pytest.mark.parametrize("arch", ["decoder_only", "encoder_only", "encoder_decoder"])
def test_window_past_max_len_is_refused(arch):
    assert ModelConfig(arch=arch, max_len=64, attn_window=64).attn_window == 64
    with pytest.raises(ConfigError, match=r"'model\.attn_window': must be <= max_len=64, got 65"):
        ModelConfig(arch=arch, max_len=64, attn_window=65)
