"""Blocks and stacks: each norm kind and placement equals its formula (and the old combined
``norm`` values read as the two fields), the decoder is causal, padding does not leak, and the
encoder is permutation-equivariant exactly when it has no positions; gradient checkpointing gives
the same gradients, and only where it should engage."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from safetensors.torch import load_file
from torch import nn
from torch.utils.checkpoint import checkpoint

from tests.helpers import FIXTURES, tiny_lm_args, write_lm_text
from vaswani.aliases import COMBINED_NORMS
from vaswani.cli import main
from vaswani.config import NORM_PLACEMENTS, ModelConfig
from vaswani.config import NORMS as KINDS
from vaswani.errors import ConfigError
from vaswani.layers import blocks
from vaswani.layers.blocks import Block, BlockStack, Decoder, Encoder, set_grad_checkpointing
from vaswani.layers.embedding import Embeddings
from vaswani.layers.masks import padding_mask
from vaswani.layers.norms import RMSNorm, final_norm
from vaswani.layers.positions import embedding_positions
from vaswani.models.bert import Bert
from vaswani.models.gpt import GPT
from vaswani.models.transformer import Transformer

DT = torch.float64
NORMS = ("post_ln", "pre_ln", "pre_rmsnorm")
POSITIONS = ("sinusoidal", "learned", "relative")
WINDOWS = (None, 2)
VOCAB, PAD = 13, 0


def _cfg(**overrides) -> ModelConfig:
    base = dict(
        src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, d_model=16, n_heads=4, d_ff=32,
        n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, max_len=64, rel_clip=3, pad_id=PAD,
    )  # fmt: skip
    return ModelConfig(**{**base, **overrides})


def _randomise_norms(module: nn.Module) -> None:
    """Non-trivial gains and biases, so that a norm applied in the wrong place shows."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.LayerNorm, RMSNorm)):
                m.weight.uniform_(0.5, 1.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.normal_(0, 0.3)


def _model(**overrides) -> Transformer:
    torch.manual_seed(0)
    model = Transformer(_cfg(**overrides)).to(DT).eval()
    _randomise_norms(model)
    return model


def _close(a, b, atol=1e-10):
    torch.testing.assert_close(a, b, atol=atol, rtol=1e-8)


# ----------------------------------------------------------------------------------------------
# Norm placements


def _layer_norm(x, norm: nn.LayerNorm):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _rms_norm(x, norm: RMSNorm):
    return x / torch.sqrt((x**2).mean(-1, keepdim=True) + norm.eps) * norm.weight


def _norm(kind):
    def apply(x, norm):
        if kind == "pre_rmsnorm":
            assert isinstance(norm, RMSNorm)
            return _rms_norm(x, norm)
        assert isinstance(norm, nn.LayerNorm)
        return _layer_norm(x, norm)

    return apply


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_rmsnorm_formula(eps):
    torch.manual_seed(0)
    norm = RMSNorm(10, eps).to(DT)
    with torch.no_grad():
        norm.weight.uniform_(-2, 2)
    x = torch.randn(3, 4, 10, dtype=DT) * 3
    _close(norm(x), x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * norm.weight)
    # No mean subtraction, no bias: it is not a LayerNorm.
    assert not torch.allclose(norm(x + 1.0), norm(x) + 1.0)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("cross", [False, True])
def test_block_equals_its_formula(norm, cross):
    torch.manual_seed(1)
    cfg = _cfg(norm=norm, norm_eps=0.25)  # a large eps, so that a norm ignoring it shows
    block = Block(cfg, causal=cross, cross=cross).to(DT).eval()
    _randomise_norms(block)
    x = torch.randn(2, 5, 16, dtype=DT)
    memory = torch.randn(2, 7, 16, dtype=DT)
    memory_mask = padding_mask(torch.tensor([[3] * 7, [3] * 4 + [0] * 3]), 0)
    kwargs = {"memory": memory, "memory_mask": memory_mask} if cross else {}
    out, _ = block(x, **kwargs)

    n = _norm(norm)

    def sa(h):
        return block.self_attn(h)[0]

    def ca(h):
        return block.cross_attn(h, memory=memory, mask=memory_mask)[0]

    h = x
    if norm == "post_ln":
        h = n(h + sa(h), block.self_attn_norm)
        if cross:
            h = n(h + ca(h), block.cross_attn_norm)
        h = n(h + block.ffn(h), block.ffn_norm)
    else:
        h = h + sa(n(h, block.self_attn_norm))
        if cross:
            h = h + ca(n(h, block.cross_attn_norm))
        h = h + block.ffn(n(h, block.ffn_norm))
    _close(out, h)
    assert block.self_attn_norm.eps == 0.25 and block.ffn_norm.eps == 0.25


@pytest.mark.parametrize("norm", NORMS)
def test_block_stack_final_norm_only_for_pre_placements(norm):
    torch.manual_seed(2)
    cfg = _cfg(norm=norm, norm_eps=0.1)
    stack = BlockStack(cfg, n_layers=3, causal=False, cross=False).to(DT).eval()
    _randomise_norms(stack)
    x = torch.randn(2, 5, 16, dtype=DT)
    h = x
    for layer in stack.layers:
        h, _ = layer(h)
    if norm == "post_ln":
        assert isinstance(stack.final_norm, nn.Identity)
        expected = h
    else:
        assert isinstance(stack.final_norm, RMSNorm if norm == "pre_rmsnorm" else nn.LayerNorm)
        expected = _norm(norm)(h, stack.final_norm)
    out, weights = stack(x)
    _close(out, expected)
    assert len(stack.layers) == 3 and len(weights) == 3


# ----------------------------------------------------------------------------------------------
# Norm kind and placement: two fields, the old combined values read as both


KINDS_AND_PLACEMENTS = list(itertools.product(KINDS, NORM_PLACEMENTS))


@pytest.mark.parametrize("kind,placement", KINDS_AND_PLACEMENTS)
@pytest.mark.parametrize("cross", [False, True])
def test_each_kind_and_placement_equals_its_formula(kind, placement, cross):
    """Every combination, post-RMSNorm included (no old value names it): the block's formula and
    the stack's final norm (only after a pre-norm stack, decided in norms.final_norm)."""
    torch.manual_seed(1)
    cfg = _cfg(norm=kind, norm_placement=placement, norm_eps=0.25)
    stack = BlockStack(cfg, n_layers=2, causal=cross, cross=cross).to(DT).eval()
    _randomise_norms(stack)
    x = torch.randn(2, 5, 16, dtype=DT)
    memory = torch.randn(2, 7, 16, dtype=DT)
    kwargs = {"memory": memory} if cross else {}
    n = _norm("pre_rmsnorm" if kind == "rmsnorm" else "pre_ln")
    h = x
    for block in stack.layers:
        sublayers = [(lambda t, b=block: b.self_attn(t)[0], block.self_attn_norm)]
        if cross:
            sublayers.append((lambda t, b=block: b.cross_attn(t, memory=memory)[0], block.cross_attn_norm))
        sublayers.append((block.ffn, block.ffn_norm))
        for sublayer, norm in sublayers:
            h = n(h + sublayer(h), norm) if placement == "post" else h + sublayer(n(h, norm))
    if placement == "pre":
        assert isinstance(stack.final_norm, RMSNorm if kind == "rmsnorm" else nn.LayerNorm)
        h = n(h, stack.final_norm)
    else:
        assert isinstance(stack.final_norm, nn.Identity)
    _close(stack(x, **kwargs)[0], h)
    assert type(final_norm(cfg)) is type(stack.final_norm)


@pytest.mark.parametrize("old,kind,placement", [(o, *COMBINED_NORMS[o]) for o in COMBINED_NORMS])
def test_old_combined_norm_is_read_as_kind_and_placement(old, kind, placement):
    """Old path = new path: a config with the old value equals the one with the two fields, in
    Python, through from_dict (a config.json), replace and presets, and builds the same model."""
    new = _cfg(norm=kind, norm_placement=placement)
    assert _cfg(norm=old) == new and (new.norm, new.norm_placement) == (kind, placement)
    assert _cfg(norm=old, norm_placement=placement) == new  # consistent: fine
    old_json = {name: value for name, value in new.to_dict().items() if name != "norm_placement"}
    assert ModelConfig.from_dict({**old_json, "norm": old}) == new  # a config.json of the old code
    other = "rmsnorm" if kind == "layernorm" else "layernorm"
    assert _cfg(norm=other, norm_placement="post" if placement == "pre" else "pre").replace(norm=old) == new
    assert new.replace(norm=other).norm_placement == placement  # a kind alone keeps the placement
    preset = ModelConfig.preset("gpt-mini", norm=old)
    assert (preset.norm, preset.norm_placement) == (kind, placement)
    torch.manual_seed(0)
    old_model = Transformer(_cfg(norm=old)).to(DT).eval()
    torch.manual_seed(0)
    new_model = Transformer(new).to(DT).eval()
    assert old_model.state_dict().keys() == new_model.state_dict().keys()
    src, tgt = torch.tensor([[4, 5, 6, 0]]), torch.tensor([[1, 7, 8]])
    _close(old_model(src, tgt), new_model(src, tgt))


@pytest.mark.parametrize("old", list(COMBINED_NORMS))
def test_old_combined_norm_with_a_contradicting_placement_is_refused_by_name(old):
    contradicting = "post" if COMBINED_NORMS[old][1] == "pre" else "pre"
    with pytest.raises(ConfigError, match=r"'model\.norm_placement'.*" + old):
        ModelConfig(norm=old, norm_placement=contradicting)
    with pytest.raises(ConfigError, match=r"'model\.norm_placement'"):
        ModelConfig.from_dict({"norm": old, "norm_placement": contradicting})
    with pytest.raises(ConfigError, match=r"'model\.norm_placement'"):
        ModelConfig.preset("tiny", norm=old, norm_placement=contradicting)
    with pytest.raises(ConfigError, match=r"'model\.norm_placement'"):
        ModelConfig().replace(norm=old, norm_placement=contradicting)


@pytest.mark.parametrize(
    "field,value",
    [("norm", "post"), ("norm", "layer_norm"), ("norm_placement", "middle"), ("norm_placement", 1)],
)
def test_bad_norm_fields_are_refused_by_name(field, value):
    with pytest.raises(ConfigError, match=rf"'model\.{field}'"):
        ModelConfig(**{field: value})


def test_run_directories_written_with_the_old_norm_values_read_as_two_fields():
    """The config.json of every fixture run has an old combined value; each reads as its two."""
    for config in sorted(FIXTURES.glob("*/config.json")):
        saved = json.loads(config.read_text(encoding="utf-8"))["model"]
        assert saved["norm"] in COMBINED_NORMS and "norm_placement" not in saved, config
        cfg = ModelConfig.from_dict(saved, source=str(config))
        assert (cfg.norm, cfg.norm_placement) == COMBINED_NORMS[saved["norm"]]


def test_layers_do_not_share_parameters():
    stack = Encoder(_cfg(n_encoder_layers=2))
    a, b = stack.layers
    assert a.self_attn.q_proj.weight.data_ptr() != b.self_attn.q_proj.weight.data_ptr()
    assert not torch.equal(a.ffn.linear1.weight, b.ffn.linear1.weight)


def test_need_weights_returns_per_layer_weights():
    model = _model()
    src = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 10]])
    source = model.encode(src)
    _, weights = model.decode(torch.tensor([[1, 4, 5], [1, 6, 7]]), source, need_weights=True)
    assert len(weights) == 2
    for w in weights:
        assert w["self"].shape == (2, 4, 3, 3) and w["cross"].shape == (2, 4, 3, 4)
        torch.testing.assert_close(w["cross"].sum(-1), torch.ones(2, 4, 3, dtype=DT))
        assert (w["cross"][0, :, :, 3] == 0).all()  # the source padding
        assert (w["self"].triu(diagonal=1) == 0).all()  # the future


# ----------------------------------------------------------------------------------------------
# Causality


ALL_VARIANTS = list(itertools.product(NORMS, POSITIONS, WINDOWS))


@pytest.mark.parametrize("norm,position,window", ALL_VARIANTS)
def test_transformer_is_causal(norm, position, window):
    model = _model(norm=norm, position=position, attn_window=window)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(3, VOCAB, (2, 6), generator=g)
    src[1, 4:] = PAD
    tgt = torch.randint(1, VOCAB, (2, 7), generator=g)
    logits = model(src, tgt)
    assert logits.shape == (2, 7, VOCAB)
    for t in range(6):
        changed = tgt.clone()
        changed[:, t + 1 :] = torch.randint(1, VOCAB, (2, 6 - t), generator=g)
        changed[:, t + 1] = (tgt[:, t + 1] % (VOCAB - 1)) + 1  # surely different at t+1
        new = model(src, changed)
        _close(new[:, : t + 1], logits[:, : t + 1])
        assert not torch.allclose(new[:, t + 1], logits[:, t + 1])  # the change is seen


@pytest.mark.parametrize("norm,position,window", ALL_VARIANTS)
@pytest.mark.parametrize("need_weights", [False, True])
def test_bare_decoder_is_causal(norm, position, window, need_weights):
    torch.manual_seed(3)
    decoder = Decoder(_cfg(norm=norm, position=position, attn_window=window)).to(DT).eval()
    _randomise_norms(decoder)
    y = torch.randn(2, 6, 16, dtype=DT)
    memory = torch.randn(2, 5, 16, dtype=DT)
    memory_mask = padding_mask(torch.tensor([[3] * 5, [3] * 2 + [0] * 3]), 0)
    out, _ = decoder(y, memory=memory, memory_mask=memory_mask, need_weights=need_weights)
    for t in range(5):
        changed = y.clone()
        changed[:, t + 1 :] = torch.randn(2, 5 - t, 16, dtype=DT)
        new, _ = decoder(changed, memory=memory, memory_mask=memory_mask, need_weights=need_weights)
        _close(new[:, : t + 1], out[:, : t + 1])
        assert not torch.allclose(new[:, t + 1], out[:, t + 1])


def test_decoder_without_causal_mask_would_fail_the_test():
    """Guard on the causality tests: a non-causal stack *does* see the future."""
    torch.manual_seed(3)
    stack = BlockStack(_cfg(), 2, causal=False, cross=False).to(DT).eval()
    y = torch.randn(1, 5, 16, dtype=DT)
    changed = y.clone()
    changed[:, 4] += 1.0
    assert not torch.allclose(stack(y)[0][:, 0], stack(changed)[0][:, 0])


# ----------------------------------------------------------------------------------------------
# Padding


@pytest.mark.parametrize("norm,position,window", ALL_VARIANTS)
def test_source_padding_invariance(norm, position, window):
    model = _model(norm=norm, position=position, attn_window=window)
    g = torch.Generator().manual_seed(1)
    sentence = torch.randint(3, VOCAB, (5,), generator=g)
    longer = torch.randint(3, VOCAB, (9,), generator=g)
    tgt = torch.randint(3, VOCAB, (1, 6), generator=g)

    def padded(row, length):
        return torch.cat([row, torch.full((length - len(row),), PAD)])

    alone = sentence[None]
    memory = model.encode(alone).memory
    logits = model(alone, tgt)
    for extra in (1, 4, 11):  # more and more pad columns
        src = padded(sentence, 5 + extra)[None]
        _close(model.encode(src).memory[:, :5], memory)
        _close(model(src, tgt), logits)
    # Next to a longer sentence in a batch, in either row order.
    batch = torch.stack([padded(sentence, 9), longer])
    _close(model.encode(batch).memory[:1, :5], memory)
    _close(model(batch, tgt.expand(2, -1))[:1], logits)
    batch = torch.stack([longer, padded(sentence, 9)])
    _close(model(batch, tgt.expand(2, -1))[1:], logits)
    # The longer sentence itself is unaffected by its padded neighbour.
    _close(model(batch, tgt.expand(2, -1))[:1], model(longer[None], tgt))


@pytest.mark.parametrize("norm,position", list(itertools.product(NORMS, POSITIONS)))
def test_target_padding_does_not_change_real_positions(norm, position):
    """Right padding of the target is after every real token, so causality alone must hide it."""
    model = _model(norm=norm, position=position)
    src = torch.tensor([[4, 5, 6, 7]])
    tgt = torch.tensor([[1, 8, 9]])
    logits = model(src, tgt)
    _close(model(src, torch.tensor([[1, 8, 9, PAD, PAD]]))[:, :3], logits)


@pytest.mark.parametrize("norm,position,window", ALL_VARIANTS)
def test_all_padding_source_row_gives_no_nan(norm, position, window):
    model = _model(norm=norm, position=position, attn_window=window)
    src = torch.tensor([[4, 5, 6, 0], [0, 0, 0, 0], [7, 8, 9, 10]])
    tgt = torch.tensor([[1, 4, 5], [1, 6, 7], [1, 8, 9]])
    source = model.encode(src)
    assert torch.isfinite(source.memory).all()
    logits = model(src, tgt)
    assert torch.isfinite(logits).all()
    # The explicit path (attention weights asked for), in both stacks.
    embedded = model.src_embed(src)
    memory, enc_weights = model.encoder(embedded, source.mask, need_weights=True)
    _close(memory, source.memory)
    assert all(torch.isfinite(w["self"]).all() for w in enc_weights)
    explicit_logits, dec_weights = model.decode(tgt, source, need_weights=True)
    assert torch.isfinite(explicit_logits).all()
    _close(explicit_logits, logits)
    assert all(torch.isfinite(w["cross"]).all() and torch.isfinite(w["self"]).all() for w in dec_weights)
    # The other rows are as if the empty one was not there.
    _close(logits[[0, 2]], model(src[[0, 2]], tgt[[0, 2]]))


@pytest.mark.parametrize("position", POSITIONS)
def test_batch_without_padding(position):
    model = _model(position=position)
    src = torch.tensor([[4, 5, 6], [7, 8, 9]])
    tgt = torch.tensor([[1, 4], [1, 6]])
    source = model.encode(src)
    assert source.mask.all()
    logits = model(src, tgt)
    assert torch.isfinite(logits).all()
    _close(logits[1:], model(src[1:], tgt[1:]))
    explicit, _ = model.decode(tgt, source, need_weights=True)
    _close(explicit, logits)


# ----------------------------------------------------------------------------------------------
# Permutation equivariance


def _perm_pair(seed=0, length=6):
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(length, generator=g)
    while torch.equal(perm, torch.arange(length)):
        perm = torch.randperm(length, generator=g)
    return perm


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("need_weights", [False, True])
def test_encoder_without_positions_is_permutation_equivariant(norm, need_weights):
    torch.manual_seed(4)
    encoder = Encoder(_cfg(norm=norm, position="sinusoidal")).to(DT).eval()
    _randomise_norms(encoder)
    x = torch.randn(2, 6, 16, dtype=DT)
    perm = _perm_pair()
    out, _ = encoder(x, need_weights=need_weights)
    permuted, _ = encoder(x[:, perm], need_weights=need_weights)
    _close(permuted, out[:, perm])
    # With padding, permuting the padding mask along with the tokens.
    mask = padding_mask(torch.tensor([[3] * 6, [3] * 4 + [0] * 2]), 0)
    out, _ = encoder(x, mask, need_weights=need_weights)
    permuted, _ = encoder(x[:, perm], mask[..., perm], need_weights=need_weights)
    _close(permuted, out[:, perm])


@pytest.mark.parametrize("position", ["sinusoidal", "learned"])
def test_absolute_positions_break_permutation_equivariance(position):
    torch.manual_seed(5)
    cfg = _cfg(position=position)
    encoder = Encoder(cfg).to(DT).eval()
    embed = Embeddings(VOCAB, 16, embedding_positions(cfg), 0.0).to(DT)
    tokens = torch.tensor([[3, 4, 5, 6, 7, 8]])
    perm = _perm_pair()
    out, _ = encoder(embed(tokens))
    permuted, _ = encoder(embed(tokens[:, perm]))
    assert not torch.allclose(permuted, out[:, perm], atol=1e-6)
    # Without the positions the same tokens are equivariant: the positions are what breaks it.
    embed.positions = None
    out, _ = encoder(embed(tokens))
    permuted, _ = encoder(embed(tokens[:, perm]))
    _close(permuted, out[:, perm])


def test_relative_positions_break_permutation_equivariance():
    torch.manual_seed(6)
    encoder = Encoder(_cfg(position="relative")).to(DT).eval()
    x = torch.randn(1, 6, 16, dtype=DT)
    perm = _perm_pair()
    out, _ = encoder(x)
    permuted, _ = encoder(x[:, perm])
    assert not torch.allclose(permuted, out[:, perm], atol=1e-6)


# ----------------------------------------------------------------------------------------------
# Truncated attention in a stack, weight tying, dropout


@pytest.mark.parametrize("window", [1, 2])
@pytest.mark.parametrize("position", POSITIONS)
def test_windowed_encoder_receptive_field(window, position):
    """With n layers of window w, position i depends on positions within n·w of it and no further."""
    torch.manual_seed(7)
    cfg = _cfg(position=position, attn_window=window, n_encoder_layers=2)
    encoder = Encoder(cfg).to(DT).eval()
    x = torch.randn(1, 12, 16, dtype=DT)
    out, _ = encoder(x)
    reach = 2 * window
    i = 5
    far = x.clone()
    far[:, i + reach + 1 :] = torch.randn(1, 12 - (i + reach + 1), 16, dtype=DT)
    far[:, : max(0, i - reach)] = torch.randn(1, max(0, i - reach), 16, dtype=DT)
    _close(encoder(far)[0][:, i], out[:, i])
    edge = x.clone()
    edge[:, i + reach] += 1.0  # just inside the receptive field: seen
    assert not torch.allclose(encoder(edge)[0][:, i], out[:, i])


@pytest.mark.parametrize("tie", ["none", "output", "all"])
def test_tie_embeddings(tie):
    model = Transformer(_cfg(tie_embeddings=tie))
    src_w, tgt_w, out_w = model.src_embed.token.weight, model.tgt_embed.token.weight, model.output.weight
    assert (out_w is tgt_w) == (tie != "none")
    assert (src_w is tgt_w) == (tie == "all")
    n_params = sum(p.numel() for p in model.parameters())
    shared = {"none": 0, "output": 1, "all": 2}[tie]
    untied = Transformer(_cfg(tie_embeddings="none"))
    assert n_params == sum(p.numel() for p in untied.parameters()) - shared * VOCAB * 16


def test_initialisation_scales():
    """Embeddings ~ N(0, 1/d) so that sqrt(d)-scaled embeddings have unit variance; biases zero."""
    torch.manual_seed(8)
    d = 64
    model = Transformer(_cfg(d_model=d, src_vocab_size=2000, tgt_vocab_size=2000, tie_embeddings="none"))
    for embed in (model.src_embed, model.tgt_embed):
        assert abs(embed.token.weight.std().item() * d**0.5 - 1.0) < 0.05
    for name, p in model.named_parameters():
        if name.endswith("bias") and "norm" not in name:
            assert (p == 0).all(), name
        if "norm" in name and name.endswith("weight"):
            assert (p == 1).all(), name


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("which", ["dropout", "attn_dropout"])
def test_dropout_only_in_training(position, which):
    torch.manual_seed(9)
    model = Transformer(_cfg(position=position, **{which: 0.5})).to(DT)
    src = torch.tensor([[4, 5, 6, 7, 0]])
    tgt = torch.tensor([[1, 8, 9, 10]])
    model.eval()
    _close(model(src, tgt), model(src, tgt))
    model.train()
    assert not torch.allclose(model(src, tgt), model(src, tgt))


# ---------------------------------------------------------------------------------------------
# Gradient checkpointing


def _checkpointed_models() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    """A Transformer (both stacks), a GPT and a BERT, dropout on everywhere, with inputs (padded)."""
    drop = dict(dropout=0.3, attn_dropout=0.2)
    src = torch.tensor([[4, 5, 6, 7, 0, 0], [8, 9, 10, 11, 12, 3]])
    tgt = torch.tensor([[1, 8, 9, 10, 0], [1, 4, 4, 5, 6]])
    gpt = ModelConfig.preset(
        "gpt-mini", src_vocab_size=VOCAB, d_model=16, n_heads=2, d_ff=32, n_layers=3, **drop
    )
    bert = ModelConfig.preset(
        "bert-base",
        src_vocab_size=VOCAB,
        d_model=16,
        n_heads=2,
        d_ff=32,
        n_encoder_layers=3,
        max_len=16,
        **drop,
    )
    return {
        "transformer": (Transformer(_cfg(n_encoder_layers=3, n_decoder_layers=3, **drop)), (src, tgt)),
        "gpt": (GPT(gpt), (tgt,)),
        "bert": (Bert(bert), (src, None, src != PAD)),
    }


def _gradients(model: nn.Module, inputs: tuple[torch.Tensor | None, ...]) -> list[torch.Tensor]:
    torch.manual_seed(5)  # the dropout masks
    model.zero_grad()
    out = model(*inputs)
    (out * torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype)).sum().backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("name", ["transformer", "gpt", "bert"])
def test_grad_checkpointing_gives_the_same_gradients_exactly(name, monkeypatch):
    """The recomputation replays the same dropout masks (the RNG state is kept), so the gradients
    are bit-identical; and it is really taken (each block once per forward, in every stack)."""
    torch.manual_seed(0)
    model, inputs = _checkpointed_models()[name]
    model.train()
    plain = _gradients(model, inputs)
    calls = []
    monkeypatch.setattr(blocks, "checkpoint", lambda *a, **k: calls.append(1) or checkpoint(*a, **k))
    set_grad_checkpointing(model)
    recomputed = _gradients(model, inputs)
    stacks = [m for m in model.modules() if isinstance(m, BlockStack)]
    assert len(calls) == sum(len(s.layers) for s in stacks) == 3 * len(stacks)
    assert len(recomputed) == len(plain) and all(
        torch.equal(a, b) for a, b in zip(plain, recomputed, strict=True)
    )
    set_grad_checkpointing(model, False)
    calls.clear()
    _gradients(model, inputs)
    assert calls == []


def test_grad_checkpointing_is_not_taken_in_eval_without_gradients_or_with_a_cache(monkeypatch):
    monkeypatch.setattr(blocks, "checkpoint", lambda *a, **k: pytest.fail("checkpointed"))
    model, (src, tgt) = _checkpointed_models()["transformer"]
    set_grad_checkpointing(model)
    model.eval()
    model(src, tgt).sum().backward()
    model.train()
    with torch.no_grad():
        model(src, tgt)
    gpt, (ids,) = _checkpointed_models()["gpt"]
    set_grad_checkpointing(gpt)
    gpt.train()
    cache = gpt.blocks.new_cache()
    gpt.blocks(gpt.embed(ids), cache=cache)
    assert cache[0].self_attn.length == ids.shape[1]


@pytest.mark.slow
def test_vaswani_train_lm_with_grad_checkpointing_matches_without(tmp_path):
    text = write_lm_text(tmp_path / "train.txt")
    args = ("--max-steps", "6", "--dropout", "0.1", "--layers", "2")
    for name, extra in (("plain", ()), ("checkpointed", ("--grad-checkpointing",))):
        assert main(tiny_lm_args(text, tmp_path / name, *args, *extra)) == 0
    plain, checkpointed = (load_file(tmp_path / n / "model.safetensors") for n in ("plain", "checkpointed"))
    assert all(torch.equal(plain[k], checkpointed[k]) for k in plain)
