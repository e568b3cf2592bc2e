"""Low-rank adapters (LoRA; Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models").

A projection y = x Wᵀ + b of W (out, in) is adapted as

    y = x Wᵀ + b + (α / r) · dropout(x) Aᵀ (M ⊙ B)ᵀ

with A (r, in) and B (out, r) the only trained tensors, W and b frozen, and M (out, 1) a mask of
the output rows that are adapted: all of them for a plain projection, the targeted slices of a
fused one (``qkv_proj`` with ``--lora-targets q_proj,v_proj`` adapts the rows of Q and V, never
those of K; the rows outside M get no gradient and stay zero). A starts as ``nn.Linear``'s
Kaiming-uniform initialisation (as PEFT's), B at zero, so an adapted model starts as its base.
Merging folds the product into the weight, W' = W + (α / r) (M ⊙ B) A, which computes the same
function (up to rounding) at the base's cost.

Shapes: x (…, in) → y (…, out). The update costs r · (in + out) multiply-adds a position (against
in · out for W) and trains r · (in + out) parameters of the layer's in · out.

:func:`apply_lora` freezes a model and wraps the projections of its attention and feed-forward
layers named in the targets (vaswani's names, :data:`~vaswani.config.LORA_TARGETS`);
:func:`merge_lora` replaces every wrapper by its merged projection; :func:`adapter_state` is the
trained tensors alone (A, M ⊙ B, and the modules trained in full).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.errors import ConfigError
from vaswani.layers.attention import MultiHeadAttention
from vaswani.layers.feedforward import FeedForward
from vaswani.layers.linear import ACTIVATIONS, Linear

__all__ = ["LoRALinear", "adapter_state", "apply_lora", "merge_lora", "merged_copy", "merged_state"]


class LoRALinear(nn.Module):
    """A frozen :class:`~vaswani.layers.linear.Linear` ``base`` (in → out) plus the low-rank update
    (α / r) · (M ⊙ B) A of the module docstring: ``x`` (…, in) → act(base(x) + update) (…, out),
    with ``lora_A`` (r, in), ``lora_B`` (out, r) and the row mask ``rows`` (out,) of booleans (None:
    every row). ``weight``, ``bias``, ``in_features`` and ``out_features`` are the base's."""

    def __init__(
        self, base: Linear, rank: int, alpha: float, dropout: float = 0.0, rows: Tensor | None = None
    ) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.rank, self.alpha, self.scale = rank, alpha, alpha / rank
        device = base.weight.device
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, device=device))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's (and PEFT's) initialisation
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, device=device))
        mask = None if rows is None else rows.to(device=device, dtype=torch.float32)[:, None]
        self.register_buffer("rows", mask, persistent=False)
        self.dropout = nn.Dropout(dropout)

    @property
    def weight(self) -> Tensor:
        return self.base.weight

    @property
    def bias(self) -> Tensor | None:
        return self.base.bias

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha}"

    def masked_B(self) -> Tensor:
        """M ⊙ B (out, r): B with the rows outside the adapted slices at zero."""
        return self.lora_B if self.rows is None else self.lora_B * self.rows.to(self.lora_B.dtype)

    def delta_weight(self) -> Tensor:
        """(α / r) · (M ⊙ B) A (out, in): what merging adds to the base weight."""
        return self.scale * (self.masked_B() @ self.lora_A)

    def forward(self, x: Tensor, activation: str = "none") -> Tensor:
        update = F.linear(F.linear(self.dropout(x), self.lora_A.to(x.dtype)), self.masked_B().to(x.dtype))
        return ACTIVATIONS[activation](self.base(x) + self.scale * update)

    def merged(self) -> Linear:
        """The base projection with W' = W + (α / r) (M ⊙ B) A (a new module, gradients on)."""
        out = Linear(self.in_features, self.out_features, bias=self.bias is not None)
        out = out.to(device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            out.weight.copy_(self.weight + self.delta_weight().to(self.weight.dtype))
            if self.bias is not None:
                out.bias.copy_(self.bias)
        return out


def _fused_rows(attn: MultiHeadAttention, name: str, targets: Sequence[str]) -> Tensor | None:
    """The row mask of a fused projection of ``attn`` (``qkv_proj``: Q, K, V rows; ``kv_proj``: K, V
    rows) for the targeted parts, or None when none of its parts is targeted."""
    d_q, d_kv = attn.n_heads * attn.d_head, attn.n_kv_heads * attn.d_head
    parts = {"q_proj": d_q, "k_proj": d_kv, "v_proj": d_kv}
    if name == "kv_proj":
        del parts["q_proj"]
    if not any(part in targets for part in parts):
        return None
    return torch.cat([torch.full((size,), part in targets) for part, size in parts.items()])


def apply_lora(
    model: nn.Module,
    rank: int,
    alpha: float,
    dropout: float,
    targets: Sequence[str],
    keep: Sequence[str] = ("head",),
) -> list[str]:
    """Freeze ``model`` and wrap, in place, the projections named in ``targets`` of every
    attention (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``; a fused ``qkv_proj`` or ``kv_proj``
    gets the rows of its targeted parts) and feed-forward layer (``linear1``, ``linear2``,
    ``gate_proj``, ``up_proj``, ``down_proj``) in :class:`LoRALinear` of this ``rank``, ``alpha``
    and ``dropout``. The top-level modules named in ``keep`` (a task's new head, as PEFT's
    ``modules_to_save``) stay trained in full. Returns the wrapped modules' names; a target that
    matches no module is a :class:`~vaswani.errors.ConfigError` naming ``--lora-targets``."""
    model.requires_grad_(False)
    wrapped: list[str] = []
    found: set[str] = set()
    for path, module in list(model.named_modules()):
        if not isinstance(module, (MultiHeadAttention, FeedForward)):
            continue
        for name, child in list(module.named_children()):
            if not isinstance(child, Linear):
                continue
            rows = None
            if name in ("qkv_proj", "kv_proj") and isinstance(module, MultiHeadAttention):
                rows = _fused_rows(module, name, targets)
                if rows is None:
                    continue
                found.update(t for t in targets if t in ("q_proj", "k_proj", "v_proj"))
            elif name not in targets:
                continue
            found.add(name)
            setattr(module, name, LoRALinear(child, rank, alpha, dropout, rows))
            wrapped.append(f"{path}.{name}")
    missing = [t for t in targets if t not in found]
    if missing:
        raise ConfigError(f"--lora-targets: this model has no projection named {missing[0]!r}")
    for name in keep:
        head = getattr(model, name, None)
        if isinstance(head, nn.Module):
            head.requires_grad_(True)
    return wrapped


def merge_lora(model: nn.Module) -> nn.Module:
    """``model`` with every :class:`LoRALinear` replaced, in place, by its merged projection."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                setattr(parent, name, child.merged())
    return model


def merged_copy(model: nn.Module) -> nn.Module:
    """``model`` with every :class:`LoRALinear` merged, without changing it or copying a weight: the
    modules on the path to an adapter are shallow copies, the rest is shared (the model itself
    when it has no adapter). For saving the weights of a model still in training."""
    if isinstance(model, LoRALinear):
        return model.merged()
    if not any(isinstance(m, LoRALinear) for m in model.modules()):
        return model
    copy = type(model).__new__(type(model))
    copy.__dict__ = model.__dict__.copy()
    copy._modules = {
        name: None if child is None else merged_copy(child) for name, child in model._modules.items()
    }
    return copy


def merged_state(state: Mapping[str, Tensor], scale: float) -> dict[str, Tensor]:
    """The state dict of an adapted model (``X.base.weight``, ``X.base.bias``, ``X.lora_A``,
    ``X.lora_B``) as that of its merged model: ``X.weight`` = W + ``scale`` · B A (``scale`` = α / r;
    B's rows outside the adapted slices are zero, never trained), ``X.bias`` = b; the other tensors
    as they are. For weights read from a file (a checkpoint), where no module is at hand."""
    out: dict[str, Tensor] = {}
    for name, tensor in state.items():
        if name.endswith(".lora_A"):
            stem = name.removesuffix(".lora_A")
            delta = scale * (state[f"{stem}.lora_B"].double() @ tensor.double())
            base = state[f"{stem}.base.weight"]
            out[f"{stem}.weight"] = (base.double() + delta).to(base.dtype)
        elif ".base." in name and name.rsplit(".base.", 1)[0] + ".lora_A" in state:
            if name.endswith(".bias"):
                out[name.replace(".base.bias", ".bias")] = tensor
        elif not name.endswith(".lora_B"):
            out[name] = tensor
    return out


def adapter_state(model: nn.Module) -> dict[str, Tensor]:
    """The trained tensors of an adapted model, by their names in it: each adapter's ``lora_A`` and
    its masked ``lora_B`` (M ⊙ B), and every other parameter that is trained (a new head)."""
    state: dict[str, Tensor] = {}
    adapters = {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}
    for name, module in adapters.items():
        state[f"{name}.lora_A"] = module.lora_A.detach()
        state[f"{name}.lora_B"] = module.masked_B().detach()
    for name, param in model.named_parameters():
        if param.requires_grad and not name.endswith((".lora_A", ".lora_B")):
            state[name] = param.detach()
    return state
