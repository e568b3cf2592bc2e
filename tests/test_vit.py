"""The ViT (models/vit.py) and drop-path in the one core (layers/blocks.py)."""

from __future__ import annotations

import math

import pytest
import torch

from vaswani.config import ModelConfig
from vaswani.errors import ConfigError, InputError
from vaswani.layers.blocks import BlockStack, DropPath, drop_path_rates
from vaswani.models.vit import ViT, interpolate_positions


def vit_config(**changes: object) -> ModelConfig:
    fields = dict(
        arch="vit", d_model=32, n_heads=4, d_ff=64, n_layers=2, image_size=8, patch_size=2, channels=1,
        norm_placement="pre", activation="gelu", norm_eps=1e-12, dropout=0.0,
    )  # fmt: skip
    return ModelConfig(**{**fields, **changes})


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_shapes_of_logits_and_hidden_states(pooling):
    torch.manual_seed(0)
    model = ViT(vit_config(pooling=pooling, channels=3), n_classes=5).eval()
    assert model(torch.randn(4, 3, 8, 8)).shape == (4, 5)
    assert model(torch.randn(2, 3, 12, 16)).shape == (2, 5)  # another resolution: positions resized
    hidden, weights = model.hidden(torch.randn(2, 3, 8, 8), need_weights=True)
    assert hidden.shape == (2, 1 + 16, 32)
    assert [w["self"].shape for w in weights] == [(2, 4, 17, 17)] * 2
    bare = ViT(vit_config(channels=3), n_classes=0)
    assert bare(torch.randn(2, 3, 8, 8)).shape == (2, 17, 32)


def test_pooling_reads_cls_or_the_patches_mean():
    torch.manual_seed(0)
    model = ViT(vit_config(pooling="mean"), n_classes=3).eval()
    pixels = torch.randn(2, 1, 8, 8)
    hidden, _ = model.hidden(pixels)
    assert torch.equal(model(pixels), model.head(hidden[:, 1:].mean(dim=1)))
    model.config = vit_config(pooling="cls")
    assert torch.equal(model(pixels), model.head(hidden[:, 0]))


def test_patch_embedding_is_a_linear_map_of_each_flattened_patch():
    torch.manual_seed(0)
    model = ViT(vit_config(channels=3), n_classes=2)
    pixels = torch.randn(2, 3, 8, 8)
    patches = pixels.unfold(2, 2, 2).unfold(3, 2, 2)  # (batch, C, rows, cols, P, P)
    flat = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 16, 3 * 4)
    weight = model.patch_embed.weight.reshape(32, -1)
    expected = flat @ weight.T + model.patch_embed.bias
    got = model.embed(pixels)[:, 1:] - model.position_embeddings[:, 1:]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        model.embed(pixels)[:, 0], (model.cls_token + model.position_embeddings[:, :1])[:, 0].expand(2, -1)
    )


def cubic_weights(t: float, a: float = -0.75) -> list[float]:
    """Keys' cubic convolution weights of the 4 source pixels around a point t past the second."""

    def k(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a if x < 2 else 0.0

    return [k(t + 1), k(t), k(1 - t), k(2 - t)]


def bicubic_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """(n_out, n_in): 1-D bicubic resampling with half-pixel centres (align_corners=False), the
    borders replicated."""
    out = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        x = (i + 0.5) * n_in / n_out - 0.5
        x0 = math.floor(x)
        for offset, w in zip((-1, 0, 1, 2), cubic_weights(x - x0), strict=True):
            out[i, min(max(x0 + offset, 0), n_in - 1)] += w
    return out


@pytest.mark.parametrize("grid", [(6, 6), (3, 5), (8, 4)])
def test_position_interpolation_is_bicubic_on_the_grid_and_keeps_cls(grid):
    torch.manual_seed(0)
    n, d = 4, 3
    positions = torch.randn(1, 1 + n * n, d, dtype=torch.float64)
    got = interpolate_positions(positions, grid)
    square = positions[0, 1:].reshape(n, n, d)
    rows, cols = bicubic_matrix(n, grid[0]), bicubic_matrix(n, grid[1])
    expected = torch.einsum("ri,ijd,cj->rcd", rows, square, cols).reshape(-1, d)
    assert torch.equal(got[0, 0], positions[0, 0])
    torch.testing.assert_close(got[0, 1:], expected, rtol=1e-6, atol=1e-6)


def test_position_interpolation_is_the_identity_at_the_trained_size():
    positions = torch.randn(1, 17, 8)
    assert interpolate_positions(positions, (4, 4)) is positions


def test_image_size_not_divisible_by_the_patch_size_is_refused():
    with pytest.raises(ConfigError, match=r"'model.image_size': must be divisible by patch_size=3, got 8"):
        vit_config(patch_size=3)
    with pytest.raises(ConfigError, match=r"'model.drop_path'"):
        vit_config(drop_path=1.0)
    with pytest.raises(InputError, match="multiples of patch_size=2"):
        ViT(vit_config(), 2)(torch.randn(1, 1, 8, 7))


def test_vit_inits_differ_as_named():
    torch.manual_seed(0)
    hf, timm = ViT(vit_config(vit_init="hf"), 2), ViT(vit_config(vit_init="timm"), 2)
    assert 0.01 < hf.cls_token.std() < 0.03 and timm.cls_token.abs().max() < 1e-5
    assert 0.01 < hf.patch_embed.weight.std() < 0.03 < 0.1 < timm.patch_embed.weight.std()  # PyTorch's
    assert torch.all(hf.patch_embed.bias == 0) and not torch.all(timm.patch_embed.bias == 0)


def test_drop_path_rates_rise_linearly_over_depth():
    assert drop_path_rates(0.3, 4) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert drop_path_rates(0.3, 1) == [0.0]


def test_drop_path_off_is_the_plain_block_exactly():
    torch.manual_seed(0)
    plain = BlockStack(vit_config(dropout=0.1), 3, causal=False, cross=False)
    dropping = BlockStack(vit_config(dropout=0.1, drop_path=0.5), 3, causal=False, cross=False)
    assert list(plain.state_dict()) == list(dropping.state_dict())
    dropping.load_state_dict(plain.state_dict())
    assert all(isinstance(layer.dropout, torch.nn.Dropout) for layer in plain.layers)
    x = torch.randn(2, 5, 32)
    plain.eval(), dropping.eval()
    assert torch.equal(plain(x)[0], dropping(x)[0])  # evaluation: drop-path is the identity
    dropping.train()
    assert not torch.equal(plain(x)[0], dropping(x)[0])  # training: on


def test_drop_path_drops_whole_samples_and_keeps_the_expectation():
    torch.manual_seed(0)
    drop = DropPath(0.25).train()
    x = torch.randn(4000, 3, 2) + 1.0
    out = drop(x)
    dropped = (out == 0).flatten(1).all(dim=1)
    kept = torch.isclose(out, x / 0.75).flatten(1).all(dim=1)
    assert torch.all(dropped | kept)  # each sample's branch is dropped or scaled, whole
    assert abs(dropped.float().mean().item() - 0.25) < 0.03
    torch.testing.assert_close(out.mean(dim=0), x.mean(dim=0), rtol=0.1, atol=0.1)
    assert torch.equal(drop.eval()(x), x)


def test_drop_path_in_a_stack_drops_residual_branches_per_sample():
    torch.manual_seed(0)
    stack = BlockStack(vit_config(drop_path=0.9), 2, causal=False, cross=False).train()
    last = stack.layers[1]
    x = torch.randn(64, 5, 32)
    out, _ = last(x)
    unchanged = torch.isclose(out, x).flatten(1).all(dim=1)  # both branches of that sample dropped
    assert 0 < int(unchanged.sum()) < 64


def test_a_stack_with_drop_path_builds_on_the_meta_device():
    with torch.device("meta"):
        stack = BlockStack(vit_config(drop_path=0.3), 4, causal=False, cross=False)
    assert [getattr(layer.dropout, "1", None) is not None for layer in stack.layers] == [
        False,
        True,
        True,
        True,
    ]
    assert stack.layers[3].dropout[1].p == pytest.approx(0.3)
