"""The rolling KV cache of windowed causal self-attention: it returns exactly the keys the window
reaches, its buffers stop growing once the window is full, and a windowed GPT (every position
scheme, grouped-query heads, a left-padded batch) and a windowed encoder-decoder generate with it
the same tokens as without a cache, greedy, sampled and by beam search."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.helpers import left_padded, position_gpt
from vaswani.config import ModelConfig
from vaswani.generation.beam import Reorderable, beam_search
from vaswani.generation.config import DecodingConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.generation.seq2seq import translate_beam_ids, translate_ids
from vaswani.layers.cache import KVCache, RollingKVCache
from vaswani.models.gpt import GPT
from vaswani.models.transformer import Transformer

DT = torch.float64
W = 3  # the window: a query sees itself and the 3 keys before it
NEW = 6 * W  # generated tokens, several times the window
SCHEMES = ["sinusoidal", "learned", "rope", "rope_interleaved", "alibi", "relative"]
# Prompts shorter than, as long as, and longer than the window and than the buffer (W + 1).
PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12], [3, 4], [12, 2, 9], [7, 1, 4, 2, 8]]


def _keys(generator: torch.Generator, rows: int, new: int) -> torch.Tensor:
    return torch.randn(rows, 2, new, 4, generator=generator, dtype=DT)


CHUNKS = [[1] * 20, [4, 1, 1, 7, 1, 1, 1, 2, 1], [13, 1, 1, 1, 1, 1, 1, 1, 1, 20, 1]]


@pytest.mark.parametrize("window", [1, 2, 3, 5])
@pytest.mark.parametrize("chunks", CHUNKS)
def test_append_returns_the_newest_window_keys_and_the_new_ones(window, chunks):
    """After t keys a step of n new ones sees keys max(0, t − w) … t + n − 1: the w before the
    first new one (fewer at the start) and the new ones; ``key`` is the newest w afterwards."""
    g = torch.Generator().manual_seed(0)
    cache = RollingKVCache(window)
    seen_keys, seen_values = _keys(g, 2, 0), _keys(g, 2, 0)
    for new in chunks:
        key, value = _keys(g, 2, new), _keys(g, 2, new)
        before = seen_keys.shape[2]
        seen_keys, seen_values = torch.cat([seen_keys, key], dim=2), torch.cat([seen_values, value], dim=2)
        keys, values = cache.append(key, value)
        assert torch.equal(keys, seen_keys[:, :, max(0, before - window) :])
        assert torch.equal(values, seen_values[:, :, max(0, before - window) :])
        assert torch.equal(cache.key, seen_keys[:, :, -window:])
        assert torch.equal(cache.value, seen_values[:, :, -window:])
        assert cache.length == seen_keys.shape[2]


def test_reorder_keeps_rows_of_the_kept_keys():
    g = torch.Generator().manual_seed(1)
    cache = RollingKVCache(W)
    for new in [5, 1, 1]:
        cache.append(_keys(g, 3, new), _keys(g, 3, new))
    kept_key, kept_value = cache.key.clone(), cache.value.clone()
    index = torch.tensor([2, 0, 0, 1])  # repeats (beam search) and a new batch size
    cache.reorder(index)
    assert torch.equal(cache.key, kept_key[index]) and torch.equal(cache.value, kept_value[index])
    key, value = _keys(g, 4, 1), _keys(g, 4, 1)
    keys, _ = cache.append(key, value)
    assert torch.equal(keys, torch.cat([kept_key[index], key], dim=2))
    cache.reorder(torch.tensor([3]))  # dropping finished rows
    assert torch.equal(cache.key, torch.cat([kept_key[index], key], dim=2)[3:, :, -W:])


def test_a_window_below_one_is_refused():
    with pytest.raises(ValueError, match="attn_window"):
        RollingKVCache(0)


def _gpt(kind: str, n_heads: int = 2, n_kv_heads: int | None = None, max_len: int = 32) -> GPT:
    return position_gpt(kind, max_len=max_len, window=W, n_heads=n_heads, n_kv_heads=n_kv_heads)


def test_windowed_layers_get_the_rolling_cache_and_others_the_growing_one():
    windowed, full = position_gpt("rope", window=W), position_gpt("rope")
    assert all(isinstance(layer.self_attn, RollingKVCache) for layer in windowed.new_cache())
    assert all(type(layer.self_attn) is KVCache for layer in full.new_cache())
    model = _transformer()
    source = model.start_decoding(torch.tensor([[3, 4, 5]]))
    assert all(isinstance(layer.self_attn, RollingKVCache) for layer in source.cache)
    assert all(type(layer.cross_attn) is KVCache for layer in source.cache)


def test_cache_buffers_stop_growing_once_the_window_is_full():
    """3 W steps of one token after a 10-token prompt: every layer's buffers keep their shape and
    bytes (those of w + max(1, w // 4) = 4 keys and values), while a full-attention model's grow
    with the length."""
    windowed, full = _gpt("rope"), position_gpt("rope")
    caches, full_caches = windowed.new_cache(), full.new_cache()
    tokens = torch.arange(2, 22).view(2, 10)
    windowed(tokens, cache=caches)
    full(tokens, cache=full_caches)
    sizes, full_sizes = [], []
    for step in range(3 * W):
        token = torch.tensor([[step % 20 + 2], [step % 7 + 2]])
        windowed(token, cache=caches)
        full(token, cache=full_caches)
        sizes.append([layer.self_attn.nbytes for layer in caches])
        full_sizes.append(sum(layer.self_attn.nbytes for layer in full_caches))
    d_head = windowed.config.d_model // windowed.config.n_heads
    capacity = W + 1
    expected = 2 * (2 * 2 * capacity * d_head) * 8  # keys and values, (batch, heads, capacity, d_head), fp64
    assert all(size == [expected] * len(caches) for size in sizes)
    assert all(layer.self_attn._key.shape == (2, 2, capacity, d_head) for layer in caches)
    assert all(layer.self_attn.key.shape[2] == W for layer in caches)
    assert full_sizes[-1] == 2 * full_sizes[0]  # 19 keys: the growing buffers doubled from 16
    assert all(layer.self_attn.length == 10 + 3 * W for layer in caches)


@pytest.mark.parametrize("kind", SCHEMES)
def test_windowed_gpt_greedy_equals_uncached(kind):
    model = _gpt(kind)
    ids, mask = left_padded(PROMPTS)
    cached = generate(lm_next_logits(model, mask, True), ids, NEW, 99, 0, keep_logits=True)
    uncached = generate(lm_next_logits(model, mask, False), ids, NEW, 99, 0, keep_logits=True)
    assert cached.tokens.shape == (len(PROMPTS), NEW)
    assert cached.tokens.tolist() == uncached.tokens.tolist()
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-9, rtol=0)
    assert all(len(set(row)) >= 4 for row in cached.tokens.tolist())  # not one repeated token


@pytest.mark.parametrize("kind", SCHEMES)
@pytest.mark.parametrize("heads", [(4, 2), (4, 1)], ids=["gqa", "mqa"])
def test_windowed_grouped_query_gpt_sampling_equals_uncached(kind, heads):
    model = _gpt(kind, *heads)
    ids, mask = left_padded(PROMPTS)
    decoding = DecodingConfig(strategy="sample", temperature=1.5, seed=3)
    cached = generate(lm_next_logits(model, mask, True), ids, NEW, 99, 0, decoding, decoding.generator())
    uncached = generate(lm_next_logits(model, mask, False), ids, NEW, 99, 0, decoding, decoding.generator())
    assert cached.tokens.tolist() == uncached.tokens.tolist()


def test_windowed_gpt_past_its_context_equals_uncached():
    """Past ``max_len`` the driver re-reads the newest half into a new rolling cache."""
    model = _gpt("alibi", max_len=12)
    ids, mask = left_padded(PROMPTS)
    cached = generate(lm_next_logits(model, mask, True), ids, 20, 99, 0, keep_logits=True)
    uncached = generate(lm_next_logits(model, mask, False), ids, 20, 99, 0, keep_logits=True)
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-9, rtol=0)


def _gpt_beam_state(model: GPT, use_cache: bool) -> Reorderable:
    """Beam search's view of a GPT over prompts without padding: the newest token fed with the
    cache (reordered with the hypotheses), the whole prefix without."""
    cache = model.new_cache() if use_cache else None
    fed = {"columns": 0}

    def next_logits(tokens: torch.Tensor) -> torch.Tensor:
        start = fed["columns"] if cache is not None else 0
        fed["columns"] = tokens.shape[1]
        return model(tokens[:, start:], cache=cache, last_only=True)[:, -1]

    def reorder(index: torch.Tensor, sources: torch.Tensor | None) -> None:
        for layer in cache or []:
            layer.self_attn.reorder(index)

    return Reorderable(next_logits, reorder)


@pytest.mark.parametrize("kind", ["rope", "alibi", "relative"])
def test_windowed_gpt_beam_search_equals_uncached(kind):
    """Rows with budgets of 9 and 20 tokens: the first is dropped from the batch while the other
    searches on (the cache's rows reordered every step, and cut)."""
    model = _gpt(kind, 4, 2)
    prefix = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [12, 2, 9, 4, 7, 1, 3]])
    budget = torch.tensor([9, 20])
    decoding = DecodingConfig(strategy="beam", beam=3, n_best=3, early_stopping="never")
    cached = beam_search(_gpt_beam_state(model, True), prefix, budget, 99, 0, decoding)
    uncached = beam_search(_gpt_beam_state(model, False), prefix, budget, 99, 0, decoding)
    assert cached.lengths.tolist() == uncached.lengths.tolist() == [[9] * 3, [20] * 3]
    assert cached.tokens.tolist() == uncached.tokens.tolist()
    torch.testing.assert_close(cached.scores, uncached.scores, atol=1e-9, rtol=0)


def _transformer(position: str = "sinusoidal") -> Transformer:
    cfg = ModelConfig(
        src_vocab_size=15, tgt_vocab_size=15, d_model=16, n_heads=4, d_ff=32, n_encoder_layers=2,
        n_decoder_layers=2, dropout=0.0, position=position, max_len=32, rel_clip=2, attn_window=2,
        tie_embeddings="none", pad_id=0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Transformer(cfg).to(DT)
    with torch.no_grad():  # small random weights and a head that maps token y to about y + 1
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.15)
        model.tgt_embed.token.weight.normal_(0.0, 1.0)
        model.output.weight.copy_(2 * model.tgt_embed.token.weight.roll(1, dims=0))
    return model.eval()


@pytest.mark.parametrize("position", ["sinusoidal", "relative"])
def test_windowed_transformer_translates_the_same_with_and_without_the_cache(position):
    model = _transformer(position)
    src = torch.tensor([[3, 4, 5, 6, 7, 8], [9, 10, 11, 0, 0, 0], [12, 13, 14, 3, 4, 0]])
    greedy = [DecodingConfig(max_new_tokens=14, use_cache=c) for c in (True, False)]
    cached, uncached = (translate_ids(model, src, 1, 15, d, keep_logits=True) for d in greedy)
    assert cached.tokens.tolist() == uncached.tokens.tolist()
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-9, rtol=0)
    beam = DecodingConfig(strategy="beam", beam=3, n_best=2, max_new_tokens=14)
    cached_beams = translate_beam_ids(model, src, 1, 13, beam)
    uncached_beams = translate_beam_ids(model, src, 1, 13, dataclasses.replace(beam, use_cache=False))
    assert cached_beams.tokens.tolist() == uncached_beams.tokens.tolist()
    torch.testing.assert_close(cached_beams.scores, uncached_beams.scores, atol=1e-9, rtol=0)
