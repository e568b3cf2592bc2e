"""Positions: the sinusoidal table against the paper's formula, learned positions, the
embedding layer, Shaw et al.'s relative attention against a naive reference, the one table that
resolves the ``position`` field, and the position ids threaded down to attention."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from tests.helpers import left_padded, position_gpt
from vaswani import config
from vaswani.config import POSITIONS, ModelConfig
from vaswani.generation.lm import lm_next_logits
from vaswani.generation.sampling import generate
from vaswani.layers.attention import KVCache, MultiHeadAttention
from vaswani.layers.embedding import Embeddings
from vaswani.layers.masks import causal_mask, combine, padding_mask
from vaswani.layers.positions import (
    SCHEMES,
    LearnedPositions,
    RelativePositions,
    Scheme,
    SinusoidalPositions,
    check_schemes,
    embedding_positions,
    positions_from_mask,
    query_key_positions,
    require,
    score_positions,
    sinusoidal_table,
)
from vaswani.models.bert import Bert
from vaswani.models.gpt import GPT
from vaswani.models.transformer import Transformer

DT = torch.float64


@pytest.mark.parametrize("max_len,d_model", [(50, 16), (50, 15), (7, 1), (30, 2), (20, 33)])
def test_sinusoidal_table_matches_paper_formula(max_len, d_model):
    table = sinusoidal_table(max_len, d_model)
    assert table.shape == (max_len, d_model)
    expected = torch.zeros(max_len, d_model, dtype=DT)
    for pos in range(max_len):
        for col in range(d_model):
            two_i = col - (col % 2)  # the 2i of PE(pos, 2i) and PE(pos, 2i+1)
            angle = pos / 10000 ** (two_i / d_model)
            expected[pos, col] = math.sin(angle) if col % 2 == 0 else math.cos(angle)
    torch.testing.assert_close(table.to(DT), expected, atol=1e-6, rtol=0)


def test_sinusoidal_module_looks_up_rows():
    module = SinusoidalPositions(20, 8)
    assert not list(module.parameters())
    positions = torch.tensor([[0, 3, 19], [5, 5, 1]])
    torch.testing.assert_close(module(positions), sinusoidal_table(20, 8)[positions])
    # Not saved: a fixed function of (max_len, d_model).
    assert "table" not in module.state_dict()


def test_learned_positions_are_trainable_rows():
    module = LearnedPositions(10, 4)
    positions = torch.tensor([[2, 0, 9]])
    torch.testing.assert_close(module(positions), module.embedding.weight[positions])
    assert module.embedding.weight.requires_grad


@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
@pytest.mark.parametrize("scale", [True, False])
def test_embeddings_formula_and_offset(kind, scale):
    torch.manual_seed(0)
    d = 8
    table = embedding_positions(ModelConfig(position=kind, max_len=16, d_model=d))
    emb = Embeddings(11, d, table, dropout=0.0, scale=scale).to(DT)
    tokens = torch.randint(0, 11, (2, 5))
    factor = math.sqrt(d) if scale else 1.0
    pos_table = emb.positions(torch.arange(16))
    expected = emb.token.weight[tokens] * factor + pos_table[:5]
    torch.testing.assert_close(emb(tokens), expected)
    # An offset continues the positions (KV-cache decoding), explicit positions override them.
    torch.testing.assert_close(emb(tokens[:, 3:], offset=3), expected[:, 3:])
    explicit = torch.tensor([[4, 5, 6, 7, 8], [0, 0, 1, 2, 3]])
    torch.testing.assert_close(
        emb(tokens, positions=explicit), emb.token.weight[tokens] * factor + pos_table[explicit]
    )
    with pytest.raises(ValueError, match="max_len"):
        emb(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len"):
        emb(tokens, offset=12)


def test_relative_scheme_has_no_absolute_positions():
    assert embedding_positions(ModelConfig(position="relative", max_len=16, d_model=8)) is None


def test_every_position_value_has_one_scheme_acting_in_one_place():
    """The ``position`` field is resolved in one table: each valid value has an entry, and each
    entry builds its module in exactly one place (the embedding, the scores, or queries and keys)."""
    assert set(SCHEMES) == set(POSITIONS)
    for kind in POSITIONS:
        cfg = ModelConfig(position=kind, d_model=12, n_heads=3, max_len=20, rel_clip=4)
        table, scores = embedding_positions(cfg), score_positions(cfg)
        assert [table, scores, query_key_positions(cfg)].count(None) == 2, kind
        if table is not None:
            assert table.max_len == 20
            assert table(torch.arange(3)).shape == (3, 12)
    relative = score_positions(ModelConfig(position="relative", d_model=12, n_heads=3, rel_clip=4))
    assert isinstance(relative, RelativePositions)
    assert relative.clip == 4 and relative.keys.weight.shape == (9, 4)
    halves = embedding_positions(ModelConfig(position="sinusoidal_halves", d_model=12, n_heads=3))
    torch.testing.assert_close(halves.table, sinusoidal_table(512, 12, halves=True))


def test_positions_of_left_padded_rows_count_real_tokens():
    mask = torch.tensor([[False, False, True, True, True], [True, True, True, True, True]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]
    assert positions_from_mask(mask, offset=3).tolist() == [[1, 2], [3, 4]]


# ----------------------------------------------------------------------------------------------
# Relative attention (Shaw et al. 2018) against a naive reference.


D_MODEL, N_HEADS = 12, 3
D_HEAD = D_MODEL // N_HEADS


def _relative_attention(clip, causal=False, window=None, fused=False):
    torch.manual_seed(11)
    relative = RelativePositions(D_HEAD, clip)
    attn = MultiHeadAttention(
        D_MODEL, N_HEADS, fused=fused, causal=causal, window=window, relative=relative
    ).to(DT)
    return attn.eval()


def _naive(
    attn: MultiHeadAttention, x: Tensor, mask: Tensor | None, q_positions: range, ids: list[int] | None = None
) -> Tensor:
    """e_ij = q_i·(k_j + a^K_ij)/sqrt(d_head), z_i = Σ_j α_ij (v_j + a^V_ij), built element by element.

    ``x`` holds all positions 0..L-1; queries are those in ``q_positions``; ``mask`` is a
    (batch, 1|heads, len(q_positions), L) may-attend mask or None. The distance of i and j is
    ``ids[j] - ids[i]`` (``j - i`` without ``ids``).
    """
    rel = attn.relative
    batch, length, _ = x.shape
    if attn.fused:
        q, k, v = attn.qkv_proj(x).chunk(3, dim=-1)
    else:
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)

    def heads(t):
        return t.view(batch, length, N_HEADS, D_HEAD).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    # The (L_q, L, d_head) tensors a^K_ij and a^V_ij, one index at a time.
    a_k = torch.zeros(len(q_positions), length, D_HEAD, dtype=DT)
    a_v = torch.zeros(len(q_positions), length, D_HEAD, dtype=DT)
    ids = list(range(length)) if ids is None else ids
    for row, i in enumerate(q_positions):
        for j in range(length):
            r = max(-rel.clip, min(rel.clip, ids[j] - ids[i]))
            a_k[row, j] = rel.keys.weight[r + rel.clip]
            a_v[row, j] = rel.values.weight[r + rel.clip]
    qi = q[:, :, list(q_positions)]  # (batch, heads, Lq, d_head)
    scores = torch.einsum("bhid,bhijd->bhij", qi, k[:, :, None, :, :] + a_k) / math.sqrt(D_HEAD)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    alpha = scores.softmax(-1)
    z = torch.einsum("bhij,bhijd->bhid", alpha, v[:, :, None, :, :] + a_v)
    return attn.out_proj(z.transpose(1, 2).reshape(batch, len(q_positions), D_MODEL))


@pytest.mark.parametrize("clip", [1, 2, 9])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_relative_attention_matches_naive_reference(clip, fused, need_weights):
    attn = _relative_attention(clip, fused=fused)
    x = torch.randn(2, 7, D_MODEL, dtype=DT)
    out, _ = attn(x, need_weights=need_weights)
    torch.testing.assert_close(out, _naive(attn, x, None, range(7)))


@pytest.mark.parametrize("clip", [1, 3])
def test_relative_attention_with_padding_and_causal_masks(clip):
    attn = _relative_attention(clip, causal=True)
    x = torch.randn(2, 7, D_MODEL, dtype=DT)
    pad = padding_mask(torch.tensor([[5] * 7, [5] * 4 + [0] * 3]), 0)
    out, weights = attn(x, mask=pad, need_weights=True)
    full_mask = combine(pad, causal_mask(7))
    torch.testing.assert_close(out, _naive(attn, x, full_mask, range(7)))
    assert (weights.masked_select(~full_mask.expand_as(weights)) == 0).all()


def test_relative_attention_with_window():
    attn = _relative_attention(2, causal=False, window=2)
    x = torch.randn(2, 8, D_MODEL, dtype=DT)
    i = torch.arange(8)
    band = ((i[:, None] - i[None, :]).abs() <= 2)[None, None]
    torch.testing.assert_close(attn(x)[0], _naive(attn, x, band, range(8)))


@pytest.mark.parametrize("clip", [1, 2, 6])
@pytest.mark.parametrize("fused", [False, True])
def test_relative_attention_with_kv_cache(clip, fused):
    """Queries that are the last positions of the cache see the distances j - i of their
    absolute positions, so incremental decoding equals the full causal computation."""
    attn = _relative_attention(clip, causal=True, fused=fused)
    x = torch.randn(2, 8, D_MODEL, dtype=DT)
    reference = _naive(attn, x, causal_mask(8), range(8))
    cache = KVCache()
    chunks = [attn(x[:, :3], cache=cache)[0]]  # a prompt of three, then one at a time
    for t in range(3, 8):
        chunks.append(attn(x[:, t : t + 1], cache=cache)[0])
    torch.testing.assert_close(torch.cat(chunks, dim=1), reference)
    # Two queries at once at the end of the cache.
    cache = KVCache()
    attn(x[:, :6], cache=cache)
    last_two, _ = attn(x[:, 6:], cache=cache)
    torch.testing.assert_close(last_two, reference[:, 6:])


def test_relative_buckets_clip_distances():
    rel = RelativePositions(D_HEAD, clip=2)
    assert rel.keys.num_embeddings == rel.values.num_embeddings == 5
    bucket = rel.bucket(torch.arange(6), torch.arange(6))
    for i in range(6):
        for j in range(6):
            assert int(bucket[i, j]) == max(-2, min(2, j - i)) + 2
    # With a cache: the 2 queries are positions 4 and 5 of 6.
    torch.testing.assert_close(rel.bucket(torch.arange(4, 6), torch.arange(6)), bucket[4:])


def test_distances_beyond_clip_share_one_embedding():
    """Changing the table row of distance +clip changes the scores of *every* key at distance
    >= clip by the same amount, and touches no key at a shorter distance."""
    clip = 2
    rel = RelativePositions(D_HEAD, clip).to(DT)
    q = torch.randn(1, 1, 7, D_HEAD, dtype=DT)
    bucket = rel.bucket(torch.arange(7), torch.arange(7))
    before = rel.key_scores(q, bucket)
    delta = torch.randn(D_HEAD, dtype=DT)
    with torch.no_grad():
        rel.keys.weight[2 * clip] += delta
    change = rel.key_scores(q, bucket) - before
    i = torch.arange(7)
    dist = i[None, :] - i[:, None]  # j - i
    expected = torch.where(dist >= clip, (q[0, 0] @ delta)[:, None], torch.zeros((), dtype=DT))
    torch.testing.assert_close(change[0, 0], expected.expand(7, 7))
    # Value side: a uniform attention row sums the far keys into the one clipped row.
    weights = torch.full((1, 1, 7, 7), 1 / 7, dtype=DT)
    term = rel.value_term(weights, bucket)
    expected_v = torch.stack(
        [sum(rel.values.weight[max(-clip, min(clip, j - r)) + clip] / 7 for j in range(7)) for r in range(7)]
    )
    torch.testing.assert_close(term[0, 0], expected_v)


def test_relative_positions_are_used():
    """The relative terms are not silently dropped: zeroing the tables changes the output."""
    attn = _relative_attention(2)
    x = torch.randn(1, 5, D_MODEL, dtype=DT)
    with_rel, _ = attn(x)
    with torch.no_grad():
        attn.relative.keys.weight.zero_()
        attn.relative.values.weight.zero_()
    without, _ = attn(x)
    assert not torch.allclose(with_rel, without)
    plain = MultiHeadAttention(D_MODEL, N_HEADS).to(DT).eval()
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if not k.startswith("relative")})
    torch.testing.assert_close(without, plain(x)[0])


# ----------------------------------------------------------------------------------------------
# Position ids threaded down to attention, and the hook of schemes that act on queries and keys.
# ``Rotary`` stands in for such a scheme (rotary positions come in a later issue): registered
# with one table entry and one config value, it is built into every self-attention.


class Rotary(nn.Module):
    """Rotary positions (Su et al. 2021) in Hugging Face Llama's half-split layout: the pair
    (x_m, x_{m + d/2}) of a query or key at position p is rotated by the angle p · base^(-2m/d).
    Keeps every ``positions`` it is given, to show which ids attention passes."""

    def __init__(self, d_head: int, base: float = 10000.0) -> None:
        super().__init__()
        self.inv_freq = base ** (-torch.arange(0, d_head, 2, dtype=DT) / d_head)
        self.seen: list[Tensor] = []

    def forward(self, q: Tensor, k: Tensor, positions: Tensor, length: int) -> tuple[Tensor, Tensor]:
        assert int(positions.max()) < length  # the bound the hook promises
        self.seen.append(positions)
        angle = positions[:, None, :, None].to(DT) * self.inv_freq  # (batch | 1, 1, new, d/2)
        cos, sin = angle.cos().repeat(1, 1, 1, 2), angle.sin().repeat(1, 1, 1, 2)

        def rotate_half(x: Tensor) -> Tensor:
            first, second = x.chunk(2, dim=-1)
            return torch.cat([-second, first], dim=-1)

        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@pytest.fixture
def rotary(monkeypatch) -> str:
    """Register ``Rotary`` as the position scheme ``rotary_test`` for one test."""
    monkeypatch.setitem(
        SCHEMES, "rotary_test", Scheme(queries_keys=lambda cfg: Rotary(cfg.d_model // cfg.n_heads))
    )
    monkeypatch.setattr(config, "POSITIONS", (*config.POSITIONS, "rotary_test"))
    return "rotary_test"


def _rotate_naive(x: Tensor, position: int, inv_freq: Tensor) -> Tensor:
    """One vector rotated pair by pair, each pair by its own 2×2 rotation matrix."""
    half = x.shape[-1] // 2
    out = x.clone()
    for m in range(half):
        angle = position * float(inv_freq[m])
        c, s = math.cos(angle), math.sin(angle)
        out[m] = c * x[m] - s * x[m + half]
        out[m + half] = s * x[m] + c * x[m + half]
    return out


def _rotary_attention(rotary_kind: str, fused: bool = False) -> MultiHeadAttention:
    torch.manual_seed(13)
    cfg = ModelConfig(position=rotary_kind, d_model=D_MODEL, n_heads=N_HEADS)
    return (
        MultiHeadAttention(D_MODEL, N_HEADS, fused=fused, causal=True, qk_positions=query_key_positions(cfg))
        .to(DT)
        .eval()
    )


@pytest.mark.parametrize("fused", [False, True])
def test_queries_and_keys_hook_matches_the_rotary_formula(rotary, fused):
    """Attention with the scheme equals softmax(R(p_i) q_i · R(p_j) k_j / sqrt(d_head)) v, each
    rotation built pair by pair, at the position ids given (here those of a left-padded row)."""
    attn = _rotary_attention(rotary, fused)
    x = torch.randn(1, 5, D_MODEL, dtype=DT)
    ids = torch.tensor([[0, 0, 1, 2, 3]])
    out, _ = attn(x, positions=ids)
    if fused:
        q, k, v = attn.qkv_proj(x).chunk(3, dim=-1)
    else:
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    q, k, v = (t.view(1, 5, N_HEADS, D_HEAD).transpose(1, 2) for t in (q, k, v))
    inv_freq = attn.qk_positions.inv_freq
    rq = torch.stack(
        [_rotate_naive(q[0, h, i], int(ids[0, i]), inv_freq) for h in range(N_HEADS) for i in range(5)]
    )
    rk = torch.stack(
        [_rotate_naive(k[0, h, i], int(ids[0, i]), inv_freq) for h in range(N_HEADS) for i in range(5)]
    )
    rq, rk = rq.view(1, N_HEADS, 5, D_HEAD), rk.view(1, N_HEADS, 5, D_HEAD)
    scores = (rq @ rk.transpose(-2, -1) / math.sqrt(D_HEAD)).masked_fill(~causal_mask(5), float("-inf"))
    expected = attn.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 5, D_MODEL))
    torch.testing.assert_close(out, expected)
    # Without ids it is 0, 1, …: not the ids above, so the output differs.
    assert not torch.allclose(attn(x)[0], out)
    torch.testing.assert_close(attn(x)[0], attn(x, positions=torch.arange(5)[None])[0])


@pytest.mark.parametrize("fused", [False, True])
def test_queries_and_keys_hook_with_kv_cache(rotary, fused):
    """With a cache the new tokens' ids continue after the cached ones (the keys are rotated
    before the cache keeps them): incremental equals the full computation."""
    attn = _rotary_attention(rotary, fused)
    x = torch.randn(2, 8, D_MODEL, dtype=DT)
    full, _ = attn(x)
    cache = KVCache()
    chunks = [attn(x[:, :3], cache=cache)[0]]
    for t in range(3, 8):
        chunks.append(attn(x[:, t : t + 1], cache=cache)[0])
    torch.testing.assert_close(torch.cat(chunks, dim=1), full)
    assert [p.tolist() for p in attn.qk_positions.seen[-5:]] == [[[t]] for t in range(3, 8)]


def _seen(model: GPT) -> list[Tensor]:
    """The ids each call gave the first layer's self-attention scheme."""
    return model.blocks.layers[0].self_attn.qk_positions.seen


LEFT_PADDED = [[5, 6, 7, 8, 9], [3, 4], [12, 2, 9]]


@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_attention_sees_the_ids_of_each_row_alone_in_a_left_padded_batch(rotary, use_cache):
    """The stack threads the ids from the attention mask (offset by the cache) down to every
    self-attention: at the real tokens of each padded row they are those of the row alone, at
    every step, and the tokens and logits are those of the row alone."""
    model = position_gpt(rotary, max_len=16)
    steps = 6
    ids, mask = left_padded(LEFT_PADDED)
    batch = generate(lm_next_logits(model, mask, use_cache), ids, steps, 99, 0, keep_logits=True)
    batch_seen = list(_seen(model))
    assert all(len(set(row)) >= 3 for row in batch.tokens.tolist())  # a comparison that shows
    for i, prompt in enumerate(LEFT_PADDED):
        _seen(model).clear()
        one, one_mask = left_padded([prompt])
        alone = generate(lm_next_logits(model, one_mask, use_cache), one, steps, 99, 0, keep_logits=True)
        assert batch.tokens[i].tolist() == alone.tokens[0].tolist()
        torch.testing.assert_close(batch.logits[i], alone.logits[0], atol=1e-10, rtol=0)
        assert len(_seen(model)) == len(batch_seen) == steps
        for together, by_itself in zip(batch_seen, _seen(model), strict=True):
            real = together.expand(len(LEFT_PADDED), -1)[i, -by_itself.shape[1] :]
            assert real.tolist() == by_itself[0].tolist()
    if use_cache:  # the prompt, then one id per step after it
        assert [int(p[0, -1]) for p in _seen(model)] == list(range(2, 2 + steps))


@pytest.mark.parametrize("ids", [[0, 0, 1, 2, 3], [0, 2, 4, 6, 8], [7, 8, 9, 10, 11]])
def test_threaded_ids_reach_a_score_bias(ids):
    """Shaw et al.'s relative scores take their distances from the position ids attention is
    given (a left-padded row's, or any others), not from the columns."""
    attn = _relative_attention(3, causal=True)
    x = torch.randn(1, 5, D_MODEL, dtype=DT)
    out, _ = attn(x, positions=torch.tensor([ids]))
    torch.testing.assert_close(out, _naive(attn, x, causal_mask(5), range(5), ids))
    shifted = [p - ids[0] for p in ids] == list(range(5))
    assert torch.allclose(out, attn(x)[0]) == shifted


# ----------------------------------------------------------------------------------------------
# Every scheme through the one interface of its place; T5's bucketed bias against Hugging Face's.


def test_the_layers_table_agrees_with_the_config_table():
    """``SCHEMES`` and ``config.POSITIONS`` name the same schemes, acting in the same places; a
    table that disagrees is refused (at import, for the real one)."""
    assert {name: scheme.places for name, scheme in SCHEMES.items()} == {
        name: [kind.acts] for name, kind in POSITIONS.items()
    }
    with pytest.raises(TypeError, match="disagree on where alibi"):
        check_schemes({**SCHEMES, "alibi": Scheme(embedding=SCHEMES["learned"].embedding)})
    with pytest.raises(TypeError, match="differ"):
        check_schemes({**SCHEMES, "extra": SCHEMES["alibi"]})


class BiasOnly(nn.Module):
    """A score scheme written for the old dispatch on known classes: a bias, not the protocol."""

    def bias(self, query_ids: Tensor, key_ids: Tensor) -> Tensor:
        return torch.zeros(())


def test_a_score_scheme_without_the_protocol_is_refused_when_the_model_is_built(monkeypatch):
    """Registered as a scheme, it stops the model's construction with an error naming what it
    lacks (before, attention would have kept neither of its two known kinds: no positions)."""
    monkeypatch.setitem(SCHEMES, "bias_only", Scheme(scores=lambda cfg, causal: BiasOnly()))
    monkeypatch.setattr(config, "POSITIONS", (*config.POSITIONS, "bias_only"))
    with pytest.raises(TypeError, match=r"'bias_only'.*ScoreScheme.*lacks value_bias, score_bias"):
        position_gpt("bias_only")
    with pytest.raises(TypeError, match="BiasOnly does not implement ScoreScheme"):
        MultiHeadAttention(D_MODEL, N_HEADS, relative=BiasOnly())
    with pytest.raises(TypeError, match=r"TablePositions.*lacks max_len, table_values"):
        require(nn.Embedding(4, 2), "embedding")


@pytest.mark.parametrize("kind", [k for k, v in POSITIONS.items() if v.acts == "embedding"])
def test_a_table_scheme_gives_its_whole_table(kind):
    table = embedding_positions(ModelConfig(position=kind, max_len=16, d_model=8))
    torch.testing.assert_close(table.table_values(), table(torch.arange(16)))
    assert not table.table_values().requires_grad


@pytest.mark.parametrize("kind", [k for k, v in POSITIONS.items() if v.acts == "scores"])
def test_the_config_table_counts_a_score_scheme_s_parameters(kind):
    """``config.POSITIONS`` (the memory estimate) counts the parameters and buffers a model's scheme
    has (ALiBi's slopes are a buffer)."""
    cfg = ModelConfig(
        d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2, n_decoder_layers=3, vocab_size=40,
        position=kind, max_len=16, rel_clip=2, rel_buckets=8, rel_max_distance=20,
    )  # fmt: skip
    layers = [m for m in Transformer(cfg).modules() if isinstance(m, MultiHeadAttention) and m.relative]
    assert len(layers) == 5
    tensors = [t for m in layers for t in (*m.relative.parameters(), *m.relative.buffers())]
    assert POSITIONS[kind].elements(cfg) == sum(t.numel() for t in tensors)


def _positionless(model: nn.Module) -> nn.Module:
    """``model`` with every position scheme taken out, in each of the three places."""
    for module in model.modules():
        if isinstance(module, Embeddings):
            module.positions = None
        if isinstance(module, MultiHeadAttention):
            module.relative, module.qk_positions = None, None
    return model


@pytest.mark.parametrize("kind", list(POSITIONS))
def test_every_registered_scheme_changes_the_model_s_output(kind):
    """Without positions a bidirectional encoder is permutation-equivariant: permuting the tokens
    permutes its outputs. Every registered scheme breaks that, so a scheme the model silently
    ignored fails here; the same weights with the positions taken out keep it."""
    cfg = ModelConfig(
        arch="encoder_only", vocab_size=24, d_model=16, n_heads=2, d_ff=32, n_layers=2, dropout=0.0,
        position=kind, max_len=16, type_vocab_size=0, pooler=False, rel_clip=2, rel_buckets=8,
        rel_max_distance=10,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Bert(cfg).to(DT).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.5)
    tokens, order = torch.tensor([[3, 7, 5, 9, 11, 4, 8]]), torch.tensor([5, 2, 0, 6, 4, 1, 3])
    with torch.no_grad():
        out, permuted = model(tokens), model(tokens[:, order])
        assert (permuted - out[:, order]).abs().max() > 1e-3
        _positionless(model)
        torch.testing.assert_close(model(tokens[:, order]), model(tokens)[:, order])


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("kind", list(POSITIONS))
def test_every_scheme_decodes_the_same_with_and_without_the_cache(kind, window):
    """Cached generation = uncached, logits and tokens, for a left-padded batch of prompts."""
    model = position_gpt(kind, window=window)
    ids, mask = left_padded(LEFT_PADDED)
    cached = generate(lm_next_logits(model, mask, True), ids, 8, 99, 0, keep_logits=True)
    uncached = generate(lm_next_logits(model, mask, False), ids, 8, 99, 0, keep_logits=True)
    assert cached.tokens.tolist() == uncached.tokens.tolist()
    torch.testing.assert_close(cached.logits, uncached.logits, atol=1e-9, rtol=0)


@pytest.mark.parametrize("kind", list(POSITIONS))
def test_every_scheme_gives_a_left_padded_row_what_it_gives_the_row_alone(kind):
    model = position_gpt(kind)
    ids, mask = left_padded(LEFT_PADDED)
    batch = generate(lm_next_logits(model, mask), ids, 6, 99, 0, keep_logits=True)
    for i, prompt in enumerate(LEFT_PADDED):
        one, one_mask = left_padded([prompt])
        alone = generate(lm_next_logits(model, one_mask), one, 6, 99, 0, keep_logits=True)
        assert batch.tokens[i].tolist() == alone.tokens[0].tolist()
        torch.testing.assert_close(batch.logits[i], alone.logits[0], atol=1e-9, rtol=0)


def _t5_pair(causal: bool, buckets: int, max_distance: int) -> tuple[nn.Module, nn.Module]:
    """Hugging Face's T5Attention with its relative bias, and ours of the same buckets, its table
    copied from theirs."""
    t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    from transformers import T5Config

    hf_cfg = T5Config(
        d_model=D_MODEL, d_kv=D_HEAD, num_heads=N_HEADS, relative_attention_num_buckets=buckets,
        relative_attention_max_distance=max_distance, is_decoder=causal,
    )  # fmt: skip
    torch.manual_seed(3)
    hf = t5.T5Attention(hf_cfg, has_relative_attention_bias=True).to(DT).eval()
    cfg = ModelConfig(position="t5_bias", d_model=D_MODEL, n_heads=N_HEADS, rel_buckets=buckets,
                      rel_max_distance=max_distance)  # fmt: skip
    ours = score_positions(cfg, causal).to(DT)
    with torch.no_grad():
        ours.table.weight.copy_(hf.relative_attention_bias.weight)
    return hf, ours


@pytest.mark.parametrize("buckets,max_distance", [(32, 128), (8, 20), (10, 7)])
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_t5_bias_matches_hugging_face_t5(causal, buckets, max_distance):
    """The same buckets as ``T5Attention._relative_position_bucket`` for every distance, and the
    same bias as its ``compute_bias`` (queries the last of the keys), within 1e-6."""
    hf, ours = _t5_pair(causal, buckets, max_distance)
    distance = torch.arange(-400, 401)
    expected = hf._relative_position_bucket(distance, not causal, buckets, max_distance)
    assert torch.equal(ours.bucket(distance), expected)
    q_len, k_len = 50, 300
    with torch.no_grad():
        reference = hf.compute_bias(q_len, k_len, past_seen_tokens=k_len - q_len)
        bias = ours.score_bias(None, torch.arange(k_len - q_len, k_len)[None], torch.arange(k_len)[None])
    assert bias.shape == reference.shape == (1, N_HEADS, q_len, k_len)
    assert (bias - reference).abs().max() <= 1e-6


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_t5_bias_is_added_to_the_scaled_scores(causal):
    """Attention with the scheme = softmax(Q Kᵀ / sqrt(d_head) + T5's bias) V, the bias from
    Hugging Face's ``compute_bias``, on SDPA and on the reference kernel."""
    hf, ours = _t5_pair(causal, 8, 20)
    attn = MultiHeadAttention(D_MODEL, N_HEADS, causal=causal, relative=ours).to(DT).eval()
    x = torch.randn(2, 30, D_MODEL, dtype=DT)
    with torch.no_grad():
        q, k, v = (
            p(x).view(2, 30, N_HEADS, D_HEAD).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj)
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(D_HEAD) + hf.compute_bias(30, 30)
        if causal:
            scores = scores.masked_fill(~causal_mask(30), float("-inf"))
        expected = attn.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 30, D_MODEL))
        for need_weights in (False, True):
            torch.testing.assert_close(attn(x, need_weights=need_weights)[0], expected)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_t5_bias_on_the_banded_path_equals_its_dense_path(causal):
    torch.manual_seed(0)
    cfg = ModelConfig(position="t5_bias", d_model=32, n_heads=4, rel_buckets=16, rel_max_distance=40)
    layer = MultiHeadAttention(32, 4, causal=causal, window=7, relative=score_positions(cfg, causal)).eval()
    x = torch.randn(2, 75, 32)
    mask = torch.ones(2, 1, 1, 75, dtype=torch.bool)
    mask[1, ..., 60:] = False
    banded, none = layer(x, mask=mask)
    dense, weights = layer(x, mask=mask, need_weights=True)
    assert none is None and weights is not None
    torch.testing.assert_close(banded, dense, atol=1e-5, rtol=1e-5)
