"""The static KV cache (``new_cache(static=max_len)``): a buffer allocated once, written at a
position tensor. A GPT (every position scheme, grouped-query heads, windowed layers, a left-padded
batch) and an encoder-decoder give with it the logits they give with the growing cache."""

from __future__ import annotations

import pytest
import torch

from tests.helpers import left_padded, position_gpt
from vaswani.config import ModelConfig
from vaswani.layers.cache import KVCache, StaticKVCache
from vaswani.layers.masks import placed_mask
from vaswani.models.transformer import Transformer

DT = torch.float64
SCHEMES = ["sinusoidal", "learned", "rope", "rope_interleaved", "alibi", "relative", "t5_bias"]
PROMPTS = [[5, 6, 7, 8, 9], [3, 4], [12, 2, 9]]
BUFFER = 20  # columns of the static cache
STEPS = 8


def test_append_writes_at_the_position_and_returns_the_whole_buffer():
    g = torch.Generator().manual_seed(0)
    cache = StaticKVCache(6, torch.zeros((), dtype=torch.long))
    first, then = torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 1, 5, generator=g)
    keys, _ = cache.append(first, first)
    cache.advance(4)
    keys, values = cache.append(then, -then)
    assert keys.shape == values.shape == (2, 3, 6, 5)
    assert torch.equal(keys[:, :, :4], first) and torch.equal(keys[:, :, 4:5], then)
    assert torch.equal(values[:, :, 4:5], -then) and not keys[:, :, 5:].any()
    assert int(cache.position) == 4  # appending does not advance: the stack does, once for its layers


@pytest.mark.parametrize("index", [[1, 1, 0, 2, 2, 0], [2, 0, 1], [1]], ids=["more", "as many", "fewer"])
def test_reorder_copies_the_filled_columns_into_the_buffer_a_whole_copy_gives(index):
    # Beam search's reorder copies only the filled columns, reusing the buffer's first rows where
    # there are no more of them: the buffers must be what indexing the whole buffer gives (the
    # tail of zeros included), and a later append must see them so.
    g = torch.Generator().manual_seed(0)
    cache = StaticKVCache(6, torch.zeros((), dtype=torch.long))
    cache.append(*[torch.randn(3, 2, 4, 5, generator=g) for _ in range(2)])
    cache.advance(4)
    rows = torch.tensor(index)
    expected = [cache.key.index_select(0, rows), cache.value.index_select(0, rows)]
    cache.reorder(rows)
    assert torch.equal(cache.key, expected[0]) and torch.equal(cache.value, expected[1])
    new = torch.randn(len(index), 2, 1, 5, generator=g)
    keys, values = cache.append(new, -new)
    expected[0][:, :, 4:5], expected[1][:, :, 4:5] = new, -new
    assert torch.equal(keys, expected[0]) and torch.equal(values, expected[1])


def test_placed_mask_is_causal_over_the_columns_with_the_window():
    mask = placed_mask(torch.tensor([2, 3]), 6, None)[0, 0]
    assert mask.tolist() == [[True, True, True, False, False, False], [True, True, True, True, False, False]]
    windowed = placed_mask(torch.tensor([4]), 6, 2)[0, 0]
    assert windowed.tolist() == [[False, False, True, True, True, False]]


def _gpt_logits(model, static: bool) -> list[torch.Tensor]:
    """The logits of a left-padded prompt's prefill and of STEPS fed tokens (a fixed sequence)."""
    ids, mask = left_padded(PROMPTS)
    rows, prompt = ids.shape
    cache = model.new_cache(static=BUFFER if static else None)
    feed = torch.arange(STEPS * rows).view(rows, STEPS) % 20 + 1
    full = torch.cat([mask, torch.ones(rows, BUFFER - prompt, dtype=torch.bool)], dim=1)
    out = [model(ids, attention_mask=full if static else mask, cache=cache)]
    for step in range(STEPS):
        seen = full if static else full[:, : prompt + step + 1]
        out.append(model(feed[:, step : step + 1], attention_mask=seen, cache=cache))
    return out


@pytest.mark.parametrize("window", [None, 2])
@pytest.mark.parametrize("kv_heads", [None, 1])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_gpt_static_cache_gives_the_growing_cache_logits(scheme, kv_heads, window):
    model = position_gpt(scheme, window=window, n_heads=2, n_kv_heads=kv_heads)
    with torch.no_grad():
        growing, static = _gpt_logits(model, False), _gpt_logits(model, True)
    for a, b in zip(growing, static, strict=True):
        torch.testing.assert_close(b, a, atol=1e-10, rtol=0)
    cache = model.new_cache(static=BUFFER)
    assert all(isinstance(layer.self_attn, StaticKVCache) for layer in cache)
    assert cache[0].self_attn.position is cache[1].self_attn.position  # one position for the stack


def test_gpt_static_cache_without_a_mask_continues_from_its_position():
    model = position_gpt("rope")
    tokens = torch.tensor([[3, 4, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        whole = model(tokens)
        cache = model.new_cache(static=10)
        first = model(tokens[:, :4], cache=cache)
        rest = [model(tokens[:, t : t + 1], cache=cache) for t in range(4, 7)]
    torch.testing.assert_close(torch.cat([first, *rest], dim=1), whole, atol=1e-10, rtol=0)
    assert int(cache[0].self_attn.position) == 7


@pytest.mark.parametrize("position", ["sinusoidal", "relative", "rope"])
def test_transformer_static_decoder_cache_gives_the_growing_cache_logits(position):
    cfg = ModelConfig(
        src_vocab_size=15, tgt_vocab_size=15, d_model=16, n_heads=4, d_ff=32, n_encoder_layers=2,
        n_decoder_layers=2, dropout=0.0, position=position, max_len=32, rel_clip=2,
        tie_embeddings="none", pad_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg).to(DT).eval()
    src = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 0, 0, 0]])
    tgt = torch.tensor([[1, 5, 9, 2, 7, 3], [1, 4, 4, 8, 2, 6]])
    logits = {}
    with torch.no_grad():
        for static in (None, 12, "primed"):
            source = model.start_decoding(src, static=None if static is None else 12)
            if static == "primed":  # cross-attention filled and buffers allocated before the first step
                memory = source.memory
                model.decoder.prime_cache(source.cache, memory, model.decoder.cross_keys_values(memory))
                primed = source.cache
                assert all(c.cross_attn.length == 6 and c.self_attn.key is not None for c in primed)
            steps = [model.decode(tgt[:, t : t + 1], source)[0] for t in range(tgt.shape[1])]
            logits[static] = torch.cat(steps, dim=1)
            assert isinstance(source.cache[0].cross_attn, KVCache)  # cross-attention: filled once
    assert torch.equal(logits["primed"], logits[12])  # the same products, made before the first step
    torch.testing.assert_close(logits[12], logits[None], atol=1e-10, rtol=0)
    torch.testing.assert_close(logits[None], model(src, tgt), atol=1e-10, rtol=0)


def test_a_static_cache_serves_causal_self_attention_only():
    model = position_gpt("learned")
    attention = model.blocks.layers[0].self_attn
    attention.causal = False
    with pytest.raises(ValueError, match="causal self-attention"):
        attention.new_cache(static=8)
