"""Weights for inference: int8 (per output channel, symmetric) and a cast to bf16.

:func:`quantize_int8` swaps every ``nn.Linear`` of a model (attention, feed-forward, the LM head)
for an :class:`Int8Linear`; embeddings keep their floating-point table (a tied head gets an int8
copy of it). Row ``o`` of a weight W (out, in) is stored as int8 q_o = round(W_o / s_o), clamped to
[-127, 127], with the scale s_o = max_i |W_oi| / 127, so that |W_oi - s_o q_oi| <= s_o / 2 and an
output y_o = Σ_i x_i s_o q_oi is within Σ_i |x_i| · s_o / 2 of the float product (plus rounding
of the arithmetic).

The product, by :func:`~vaswani.layers.kernels.int8_rows_apply`: on the CPU, each row of the
activations x is quantized the same way, x_q = round(x / s_x) with s_x = max_i |x_i| / 127, the
product Σ_i x_q,i q_oi summed exactly in int32 (``torch._int_mm``) and scaled by s_x s_o, plus the
bias. Each input is then within s_x / 2, so an output is within a further Σ_i |s_o q_oi| · s_x / 2 of
the weight-only product; and a row's output depends on that row alone (not on the batch beside it:
batched, cached and speculative decoding give what one row at a time gives). Elsewhere
``torch.ops.aten._weight_int8pack_mm`` where the device and dtype have the kernel (not in a graph
compiled for the CPU: :func:`~vaswani.layers.kernels.int8pack_applies`), else the weight
dequantized on the fly (``F.linear`` with s ⊙ q in the activations' dtype).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from vaswani.errors import ConfigError
from vaswani.layers.kernels import blocked_applies, blocked_product, int8_rows_apply, int8pack_applies
from vaswani.layers.linear import ACTIVATIONS

__all__ = ["DTYPES", "QUANTIZATIONS", "Int8Linear", "cast_weights", "prepare_weights", "quantize_int8"]

QUANTIZATIONS = ("int8",)
"""The values of ``--quantize``."""

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""The values of ``--dtype``: the floating-point type of the weights (and so of the activations)."""

_NO_KERNEL: set[tuple[str, torch.dtype]] = set()
"""(device type, dtype) pairs on which ``_weight_int8pack_mm`` raised: dequantized there instead."""

_NO_INT_MM: list[bool] = []
"""Holds True once ``torch._int_mm`` raised: the weight-only paths from then on."""


def int8_rows_linear(x: Tensor, q: Tensor, scales: Tensor, bias: Tensor | None) -> Tensor:
    """x (rows, in) quantized row by row as the weights are (:func:`quantize_weight`: x_q =
    round(x / s_x), s_x = max_i |x_i| / 127), times the int8 weights q (out, in) with int32 sums,
    scaled back by s_x and the weights' scales (out,), plus the bias: (rows, out), float32."""
    x = x.float()
    # s_x, at least the smallest normal float (a row of zeros: its x_q and output are 0 with any
    # scale), computed in place
    x_scales = x.abs().amax(dim=1, keepdim=True).div_(127.0).clamp_min_(torch.finfo(torch.float32).tiny)
    x_q = torch.div(x, x_scales).round_().to(torch.int8)
    sums = torch._int_mm(x_q, q.t())
    # Scaled back into the int32 sums' own memory, as float32: with a new (rows, out) tensor beside
    # them the layer took 1,197 µs against 286 at 128 rows x 2,048 outputs, the product 172 (AMD
    # EPYC, one thread, fresh pages for the new tensor); at every shape a pass and an allocation less
    out = torch.mul(sums, x_scales, out=sums.view(torch.float32))
    return out.mul_(scales) if bias is None else torch.addcmul(bias, out, scales, out=out)


def quantize_weight(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Per-output-channel symmetric int8: ``weight`` (out, in) → int8 q (out, in) and float32
    scales s (out,), s_o = max_i |W_oi| / 127 (1 for a row of zeros), q = clamp(round(W / s))."""
    w = weight.detach().float()
    scales = w.abs().amax(dim=1) / 127.0
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


class Int8Linear(nn.Module):
    """y = act(x (s ⊙ q)ᵀ + b) with int8 weights q (out, in) and per-row scales s (out,): the
    inference-only stand-in of a :class:`~vaswani.layers.linear.Linear`, with its call signature
    (``x`` (…, in) → (…, out), an optional activation by name). The scales and the bias are kept
    in float32 and used in the activations' dtype. A forward pass in training mode is a
    :class:`~vaswani.errors.ConfigError`: the weights have no gradients. Compiled decoding of one or
    two rows multiplies by ``blocked``, q in blocks of 16 output columns
    (:func:`~vaswani.layers.blocked.block_projections`), where it has one: weight-only, the
    activations kept in float32."""

    blocked: Tensor | None = None
    """q as :func:`~vaswani.layers.kernels.blocked_weight` (not a buffer: never saved), or None."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        q, scales = quantize_weight(linear.weight)
        self.register_buffer("weight_int8", q.to(linear.weight.device))
        self.register_buffer("scales", scales.to(linear.weight.device))
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        self.register_buffer("bias", bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"

    def dequantized(self, dtype: torch.dtype) -> Tensor:
        """The weight s ⊙ q (out, in) in ``dtype``."""
        return self.weight_int8.to(dtype) * self.scales[:, None].to(dtype)

    def forward(self, x: Tensor, activation: str = "none") -> Tensor:
        if self.training:
            raise ConfigError("int8 weights serve inference only (--quantize int8 does not train)")
        if blocked_applies(x, self.blocked):  # compiled decoding of one or two rows: weight-only
            assert self.blocked is not None
            out = blocked_product(x, self.blocked, self.out_features, self.scales)
            return ACTIVATIONS[activation](out if self.bias is None else out + self.bias)
        if not _NO_INT_MM and int8_rows_apply(x):
            try:
                out = int8_rows_linear(
                    x.reshape(-1, self.in_features), self.weight_int8, self.scales, self.bias
                )
                return ACTIVATIONS[activation](out.to(x.dtype).reshape(*x.shape[:-1], self.out_features))
            except (RuntimeError, NotImplementedError):
                _NO_INT_MM.append(True)
        bias = None if self.bias is None else self.bias.to(x.dtype)
        key = (x.device.type, x.dtype)
        if key not in _NO_KERNEL and int8pack_applies(x):
            try:
                flat = x.reshape(-1, self.in_features)
                out = torch.ops.aten._weight_int8pack_mm(flat, self.weight_int8, self.scales.to(x.dtype))
                out = out.reshape(*x.shape[:-1], self.out_features)
                return ACTIVATIONS[activation](out if bias is None else out + bias)
            except (RuntimeError, NotImplementedError):
                _NO_KERNEL.add(key)
        return ACTIVATIONS[activation](F.linear(x, self.dequantized(x.dtype), bias))


def quantize_int8(model: nn.Module) -> nn.Module:
    """``model`` with every ``nn.Linear`` (attention, feed-forward, the LM head; tied or not)
    replaced in place by an :class:`Int8Linear`, embeddings kept; put in eval mode and returned."""
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child))
    return model.eval()


def cast_weights(model: nn.Module, dtype: str) -> nn.Module:
    """``model`` with its floating-point parameters and buffers in ``dtype`` (``fp32``, ``bf16``)."""
    if dtype not in DTYPES:
        raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return model.to(DTYPES[dtype])


def prepare_weights(model: nn.Module, quantize: str | None = None, dtype: str | None = None) -> nn.Module:
    """A loaded model made ready for inference as ``--quantize`` and ``--dtype`` say (None: as it
    is): cast first, then quantized (the int8 layers then compute in that dtype)."""
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ConfigError(f"--quantize must be one of {', '.join(QUANTIZATIONS)}, got {quantize!r}")
    if dtype is not None:
        cast_weights(model, dtype)
    if quantize == "int8":
        quantize_int8(model)
    return model.eval()
