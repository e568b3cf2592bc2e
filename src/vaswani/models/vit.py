"""The Vision Transformer (Dosovitskiy et al. 2021): an image read as a sequence of patches by the
one encoder stack.

    z_0 = [x_cls; x_p^1 E; …; x_p^N E] + E_pos        N = (H / P) · (W / P) patches of P × P pixels
    z_L = BlockStack_bidirectional(Dropout(z_0))      pre-LN blocks, then the final norm
    y   = head(z_L[CLS])  or  head(mean_i z_L[i])      (batch, n_classes)

The patch projection E is a convolution with kernel and stride P (the same map as flattening each
patch and a linear layer). The positions E_pos are learned for the trained grid (``image_size`` /
``patch_size`` patches a side); an image of another size has the grid part resized bicubically
(:func:`interpolate_positions`, Hugging Face's ``interpolate_pos_encoding``), [CLS]'s kept.

The weights are named after Hugging Face's ``ViTForImageClassification``, one to one:
``patch_embed`` (``embeddings.patch_embeddings.projection``), ``cls_token``,
``position_embeddings``, ``blocks.layers.N`` (``encoder.layer.N``), ``blocks.final_norm``
(``layernorm``) and ``head`` (``classifier``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.config import ModelConfig
from vaswani.errors import InputError
from vaswani.layers.blocks import BlockStack
from vaswani.layers.linear import Linear

INIT_STD = 0.02
TIMM_CLS_STD = 1e-6


def interpolate_positions(positions: Tensor, grid: tuple[int, int]) -> Tensor:
    """The position embeddings ``positions`` (1, 1 + n², d) of an n × n grid, for a grid of
    ``grid`` = (rows, columns) patches: [CLS]'s row kept, the grid's resized by bicubic
    interpolation (``align_corners=False``, as Hugging Face's ``interpolate_pos_encoding``) →
    (1, 1 + rows · columns, d); unchanged when ``grid`` is n × n."""
    n = round((positions.shape[1] - 1) ** 0.5)
    if grid == (n, n):
        return positions
    cls, patches = positions[:, :1], positions[:, 1:]
    d = positions.shape[-1]
    square = patches.reshape(1, n, n, d).permute(0, 3, 1, 2)
    resized = F.interpolate(square.float(), size=grid, mode="bicubic", align_corners=False)
    resized = resized.to(positions.dtype).permute(0, 2, 3, 1).reshape(1, grid[0] * grid[1], d)
    return torch.cat([cls, resized], dim=1)


class ViT(nn.Module):
    """``pixels`` (batch, channels, H, W), H and W multiples of ``patch_size`` → logits (batch,
    n_classes), or the final hidden states (batch, 1 + patches, d_model) with ``n_classes=0`` (no
    head, Hugging Face's ``ViTModel``). ``cfg`` has ``arch="vit"``; pixels of another shape are an
    :class:`~vaswani.errors.InputError`."""

    def __init__(self, cfg: ModelConfig, n_classes: int) -> None:
        super().__init__()
        if cfg.arch != "vit":
            raise ValueError(f"ViT needs arch='vit', got {cfg.arch!r}")
        self.config = cfg
        d, grid = cfg.d_model, cfg.image_size // cfg.patch_size
        self.patch_embed = nn.Conv2d(cfg.channels, d, kernel_size=cfg.patch_size, stride=cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d))
        self.position_embeddings = nn.Parameter(torch.zeros(1, 1 + grid * grid, d))
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = BlockStack(cfg, cfg.n_layers, causal=False, cross=False)
        self.head = Linear(d, n_classes) if n_classes else None
        self._init_weights()

    def _init_weights(self) -> None:
        """``cfg.vit_init``: ``hf`` is Hugging Face's (N(0, 0.02) truncated at ±2, as theirs, for
        every linear map, the patch projection, [CLS] and the positions; zero biases; norms 1 and
        0), ``timm`` timm's (the same, but N(0, 1e-6) for [CLS] and PyTorch's default for the patch
        projection)."""
        hf = self.config.vit_init == "hf"
        for module in self.modules():
            if isinstance(module, nn.Linear) or (hf and module is self.patch_embed):
                nn.init.trunc_normal_(module.weight, std=INIT_STD)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        nn.init.trunc_normal_(self.position_embeddings, std=INIT_STD)
        if hf:
            nn.init.trunc_normal_(self.cls_token, std=INIT_STD)
        else:
            nn.init.normal_(self.cls_token, std=TIMM_CLS_STD)

    def embed(self, pixels: Tensor) -> Tensor:
        """z_0 (batch, 1 + patches, d_model): [CLS] and the projected patches, with their positions
        (resized to the image's grid), before dropout."""
        patches = self.patch_embed(pixels)  # (batch, d_model, H / P, W / P)
        grid = (patches.shape[2], patches.shape[3])
        tokens = patches.flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        return torch.cat([cls, tokens], dim=1) + interpolate_positions(self.position_embeddings, grid)

    def hidden(self, pixels: Tensor, need_weights: bool = False) -> tuple[Tensor, list[dict[str, Tensor]]]:
        """The final hidden states z_L (batch, 1 + patches, d_model) and, with ``need_weights``,
        each layer's self-attention weights (``"self"``: batch, heads, 1 + patches, 1 + patches)."""
        size = self.config.patch_size
        if pixels.dim() != 4 or pixels.shape[1] != self.config.channels:
            channels = self.config.channels
            raise InputError(f"expected pixels (batch, {channels}, H, W), got {tuple(pixels.shape)}")
        if pixels.shape[2] % size or pixels.shape[3] % size:
            raise InputError(
                f"image height and width must be multiples of patch_size={size}, got {tuple(pixels.shape)}"
            )
        return self.blocks(self.dropout(self.embed(pixels)), need_weights=need_weights)

    def pool(self, hidden: Tensor) -> Tensor:
        """The image vector (batch, d_model): the [CLS] state, or the mean of the patches' states
        (``cfg.pooling``)."""
        return hidden[:, 1:].mean(dim=1) if self.config.pooling == "mean" else hidden[:, 0]

    def forward(self, pixels: Tensor) -> Tensor:
        hidden, _ = self.hidden(pixels)
        return hidden if self.head is None else self.head(self.pool(hidden))
