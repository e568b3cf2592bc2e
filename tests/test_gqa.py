"""Grouped-query and multi-query attention (``n_kv_heads``): n_kv_heads = n_heads is today's
attention bit for bit, both paths equal a reference that repeats the key/value heads, the KV cache
keeps the key/value heads only, cached = uncached generation, a tiny translation run trains, and
bad input and Hugging Face export are refused naming the field."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import left_padded, one_line, position_gpt, tiny_args, write_reverse_task
from vaswani.cli import main
from vaswani.config import ModelConfig
from vaswani.errors import ConfigError
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.interop import bert, gpt2, marian
from vaswani.layers import attention as attention_module
from vaswani.layers.attention import KVCache, MultiHeadAttention
from vaswani.models.gpt import GPT
from vaswani.pipelines.translation import Translator

D_MODEL = 32
GROUPINGS = [(4, 1), (4, 2), (8, 1), (8, 2)]
PROMPTS = [[5, 6, 7, 8, 9], [3, 4], [12, 2, 9]]


def _layer(n_heads: int, n_kv_heads: int | None, fused: bool, cross: bool = False, causal: bool = False):
    torch.manual_seed(0)
    layer = MultiHeadAttention(
        D_MODEL, n_heads, fused=fused, cross=cross, causal=causal, n_kv_heads=n_kv_heads
    )
    with torch.no_grad():  # non-zero biases so that a wrong slice of the projections shows
        for name, p in layer.named_parameters():
            if name.endswith("bias"):
                p.normal_()
    return layer.eval()


def _projections(layer: MultiHeadAttention) -> tuple[torch.Tensor, ...]:
    """(W_q, b_q, W_k, b_k, W_v, b_v), cut out of the fused projections where the layer has them."""
    d_kv = layer.n_kv_heads * layer.d_head
    if layer.fused and not layer.cross:
        sizes = [D_MODEL, d_kv, d_kv]
        w, b = layer.qkv_proj.weight.split(sizes), layer.qkv_proj.bias.split(sizes)
        return w[0], b[0], w[1], b[1], w[2], b[2]
    if layer.fused:
        w, b = layer.kv_proj.weight.split(d_kv), layer.kv_proj.bias.split(d_kv)
        return layer.q_proj.weight, layer.q_proj.bias, w[0], b[0], w[1], b[1]
    return (
        layer.q_proj.weight, layer.q_proj.bias, layer.k_proj.weight, layer.k_proj.bias,
        layer.v_proj.weight, layer.v_proj.bias,
    )  # fmt: skip


def reference(layer: MultiHeadAttention, x: torch.Tensor, source: torch.Tensor, keep: torch.Tensor):
    """Grouped-query attention written out: key/value heads repeated for their groups of query
    heads (``repeat_interleave``), then plain softmax attention over the keys ``keep``
    (batch, 1, q_len | 1, k_len) allows."""
    wq, bq, wk, bk, wv, bv = _projections(layer)
    h, g, d = layer.n_heads, layer.n_heads // layer.n_kv_heads, layer.d_head
    q = F.linear(x, wq, bq).unflatten(-1, (h, d)).transpose(1, 2)
    k = F.linear(source, wk, bk).unflatten(-1, (h // g, d)).transpose(1, 2).repeat_interleave(g, dim=1)
    v = F.linear(source, wv, bv).unflatten(-1, (h // g, d)).transpose(1, 2).repeat_interleave(g, dim=1)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~keep, float("-inf"))
    out = scores.softmax(-1) @ v
    return F.linear(out.transpose(1, 2).flatten(-2), layer.out_proj.weight, layer.out_proj.bias)


def _run(layer, x, memory, mask, path, monkeypatch):
    """The layer's output on the explicit path, or on SDPA with or without ``enable_gqa``."""
    monkeypatch.setattr(attention_module, "explicit_attention_is_faster", lambda q: path == "explicit")
    monkeypatch.setattr(attention_module, "sdpa_takes_grouped_heads", lambda q, masked: path == "sdpa_gqa")
    with torch.no_grad():
        return layer(x, memory=memory, mask=mask)[0]


PATHS = ["explicit", "sdpa_gqa", "sdpa_expanded"]


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_as_many_kv_heads_as_heads_is_todays_attention_bit_for_bit(fused, cross):
    today, grouped = _layer(4, None, fused, cross), _layer(4, 4, fused, cross)
    grouped.load_state_dict(today.state_dict())
    x, memory = torch.randn(3, 7, D_MODEL), torch.randn(3, 5, D_MODEL)
    with torch.no_grad():
        for need_weights in (False, True):
            a = today(x, memory if cross else None, need_weights=need_weights)
            b = grouped(x, memory if cross else None, need_weights=need_weights)
            assert torch.equal(a[0], b[0])
    cfg = ModelConfig(arch="decoder_only", vocab_size=30, d_model=D_MODEL, n_heads=4, d_ff=64, n_layers=2)
    torch.manual_seed(0)
    gpt = GPT(cfg).eval()
    same = GPT(cfg.replace(n_kv_heads=4)).eval()
    same.load_state_dict(gpt.state_dict())
    tokens = torch.randint(1, 30, (2, 9))
    assert torch.equal(gpt(tokens), same(tokens))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize(("n_heads", "n_kv_heads"), GROUPINGS)
def test_self_attention_equals_the_repeated_heads_reference(
    n_heads, n_kv_heads, fused, causal, padded, path, monkeypatch
):
    layer = _layer(n_heads, n_kv_heads, fused, causal=causal)
    x = torch.randn(3, 9, D_MODEL)
    lengths = torch.tensor([9, 6, 2]) if padded else torch.tensor([9, 9, 9])
    key_mask = (torch.arange(9)[None] < lengths[:, None])[:, None, None, :]
    keep = key_mask & (torch.ones(9, 9, dtype=torch.bool).tril() if causal else True)
    out = _run(layer, x, None, key_mask if padded else None, path, monkeypatch)
    with torch.no_grad():
        torch.testing.assert_close(out, reference(layer, x, x, keep), atol=1e-6, rtol=0)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize(("n_heads", "n_kv_heads"), GROUPINGS)
def test_cross_attention_equals_the_repeated_heads_reference(n_heads, n_kv_heads, fused, path, monkeypatch):
    layer = _layer(n_heads, n_kv_heads, fused, cross=True)
    x, memory = torch.randn(3, 4, D_MODEL), torch.randn(3, 6, D_MODEL)
    key_mask = (torch.arange(6)[None] < torch.tensor([6, 3, 1])[:, None])[:, None, None, :]
    out = _run(layer, x, memory, key_mask, path, monkeypatch)
    with torch.no_grad():
        torch.testing.assert_close(out, reference(layer, x, memory, key_mask), atol=1e-6, rtol=0)


@pytest.mark.parametrize("fused", [False, True])
def test_the_cache_keeps_the_kv_heads_only(fused):
    layer = _layer(8, 2, fused, causal=True)
    x = torch.randn(2, 5, D_MODEL)
    cache = KVCache()
    with torch.no_grad():
        steps = [layer(x[:, t : t + 1], cache=cache)[0] for t in range(5)]
        whole = layer(x)[0]
    assert cache.key.shape == cache.value.shape == (2, 2, 5, D_MODEL // 8)
    torch.testing.assert_close(torch.cat(steps, dim=1), whole, atol=1e-6, rtol=0)


@pytest.mark.parametrize("n_kv_heads", [1, 2])
@pytest.mark.parametrize("position", ["learned", "relative", "rope", "alibi"])
def test_cached_generation_equals_uncached(position, n_kv_heads):
    model = position_gpt(position, n_heads=4, n_kv_heads=n_kv_heads)
    ids, mask = left_padded(PROMPTS)
    cached = generate(lm_next_logits(model, mask, True), ids, 10, 99, 0, keep_logits=True)
    uncached = generate(lm_next_logits(model, mask, False), ids, 10, 99, 0, keep_logits=True)
    assert cached.tokens.tolist() == uncached.tokens.tolist()
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-9, rtol=0)
    assert all(len(set(row)) >= 2 for row in cached.tokens.tolist())  # not one repeated token
    cache = model.new_cache()
    with torch.no_grad():
        model(ids, mask, cache=cache)
    assert cache[0].self_attn.key.shape == (3, n_kv_heads, ids.shape[1], 4)


def test_a_translation_model_with_grouped_heads_trains(tmp_path):
    src, tgt = write_reverse_task(tmp_path, n=120)
    out = tmp_path / "run"
    assert main(tiny_args(src, tgt, out, "--n-kv-heads", "2", "--max-steps", "3")) == 0
    model = Translator.load(out).model
    assert model.config.n_kv_heads == 2
    layer = model.decoder.layers[0]
    for attn in (model.encoder.layers[0].self_attn, layer.self_attn, layer.cross_attn):
        assert attn.k_proj.weight.shape == attn.v_proj.weight.shape == (2 * attn.d_head, 64)
    assert Translator.load(out).translate(["a b c"])[0] is not None


@pytest.mark.parametrize("n_kv_heads", [3, 0])
def test_n_kv_heads_that_does_not_divide_n_heads_exits_2(tmp_path, capsys, n_kv_heads):
    src, tgt = write_reverse_task(tmp_path, n=20)
    assert main(tiny_args(src, tgt, tmp_path / "run", "--n-kv-heads", str(n_kv_heads))) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "n_kv_heads" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match="n_kv_heads"):
        ModelConfig(n_heads=8, n_kv_heads=3)


@pytest.mark.parametrize(
    ("family", "to_hf"),
    [
        (gpt2, lambda cfg: gpt2.config_to_hf(cfg)),
        (marian, lambda cfg: marian.config_to_hf(cfg, SimpleNamespace(eos_id=2, bos_id=1))),
        (bert, lambda cfg: bert.config_to_hf(cfg, mlm_head=True)),
    ],
)
def test_export_to_a_family_without_grouped_heads_is_refused(family, to_hf):
    cfg = family.config_from_hf({"model_type": family.MODEL_TYPE})
    assert to_hf(cfg.replace(n_kv_heads=cfg.n_heads))["model_type"] == family.MODEL_TYPE
    with pytest.raises(ConfigError) as exc:
        to_hf(cfg.replace(n_kv_heads=cfg.n_heads // 2))
    assert one_line(exc).startswith("config field 'model.n_kv_heads'")
