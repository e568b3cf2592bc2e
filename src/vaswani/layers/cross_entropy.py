"""The output projection and the cross-entropy in one pass, chunked: the (rows, vocab) logits of a
long batch are never held whole.

For hidden states h (N, d), the head's weight W (V, d) and bias b (V), and targets y (N):

    loss = Σ_i [ logsumexp_v (h_i · W_v + b_v) − (h_i · W_{y_i} + b_{y_i}) ]

summed over the rows whose target is not ``ignore_index``, the softmax over the first ``n_classes``
rows of W (the rows that pad an embedding to a multiple of 64 are never targets). The gradients are

    ∂loss/∂z_i = softmax(z_i) − onehot(y_i),   ∂h_i = ∂z_i W,   ∂W = Σ_i ∂z_iᵀ h_i,   ∂b = Σ_i ∂z_i

and are computed in the forward pass, a chunk of rows at a time (Liger-Kernel's arrangement): a chunk's
logits (chunk, V) are made, reduced to its loss and its gradients, and freed before the next chunk.
What stays for the backward pass is ∂h (N, d) and ∂W, ∂b (the size of the head), scaled there by the
incoming gradient. Without gradients (evaluation) only the losses are computed.

The products run in the dtype autocast gives them (bf16 under bf16 autocast), the softmax and the
loss in float32 (float64 for float64 inputs), ∂W and ∂b accumulated so. Against
``F.cross_entropy(F.linear(h, W, b))`` the result is the same arithmetic in another order: equal to
rounding.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

ELEMENTS = 2**22  # logits of one chunk: its rows are ELEMENTS // V (16 MB of float32; 83 rows of GPT-2's)


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        h: Tensor,
        weight: Tensor,
        bias: Tensor | None,
        targets: Tensor,
        n_classes: int,
        ignore_index: int,
        chunk: int,
    ) -> Tensor:
        w = weight[:n_classes]
        b = None if bias is None else bias[:n_classes]
        wide = torch.promote_types(weight.dtype, torch.float32)  # float32, or float64 for float64 inputs
        total = torch.zeros((), dtype=wide, device=h.device)
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(h) if need_h else None
        grad_w = torch.zeros(w.shape, dtype=wide, device=w.device) if need_w else None
        grad_b = torch.zeros(b.shape, dtype=wide, device=b.device) if need_b and b is not None else None
        kind = h.device.type
        low = torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else h.dtype
        w_low, b_low = w.to(low), None if b is None else b.to(low)  # cast once, not per chunk
        rows = chunk if chunk else max(1, ELEMENTS // w.shape[0])
        for start in range(0, h.shape[0], rows):
            hc, yc = h[start : start + rows].to(low), targets[start : start + rows]
            z = F.linear(hc, w_low, b_low).to(wide)  # a copy only where low is narrower
            keep = yc != ignore_index
            safe = torch.where(keep, yc, 0)
            lse = torch.logsumexp(z, dim=-1)
            picked = z.gather(1, safe[:, None]).squeeze(1)
            total = total + torch.where(keep, lse - picked, 0.0).sum()
            if not (need_h or need_w or need_b):
                continue
            dz = z.sub_(lse[:, None]).exp_()  # the softmax, in place of the logits
            dz[torch.arange(len(yc), device=z.device), safe] -= 1
            dz.mul_(keep[:, None])
            dz_low = dz.to(low)
            if grad_h is not None:
                grad_h[start : start + rows] = (dz_low @ w_low).to(h.dtype)
            if grad_w is not None:
                grad_w += (dz_low.t() @ hc).to(wide)
            if grad_b is not None:
                grad_b += dz.sum(0)
        ctx.save_for_backward(*(g for g in (grad_h, grad_w, grad_b) if g is not None))
        ctx.present = (grad_h is not None, grad_w is not None, grad_b is not None)
        ctx.shapes = (weight.shape, None if bias is None else bias.shape, weight.dtype)
        return total

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        saved = iter(ctx.saved_tensors)
        grad_h, grad_w, grad_b = (next(saved) if present else None for present in ctx.present)
        weight_shape, bias_shape, dtype = ctx.shapes
        out_h = None if grad_h is None else grad_h * grad_out.to(grad_h.dtype)
        out_w = out_b = None
        if grad_w is not None:
            out_w = torch.zeros(weight_shape, dtype=dtype, device=grad_w.device)
            out_w[: grad_w.shape[0]] = (grad_w * grad_out).to(dtype)
        if grad_b is not None and bias_shape is not None:
            out_b = torch.zeros(bias_shape, dtype=dtype, device=grad_b.device)
            out_b[: grad_b.shape[0]] = (grad_b * grad_out).to(dtype)
        return out_h, out_w, out_b, None, None, None, None


def linear_cross_entropy(
    h: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    targets: Tensor,
    n_classes: int | None = None,
    ignore_index: int = -100,
    chunk: int = 0,
) -> Tensor:
    """``F.cross_entropy(F.linear(h, weight, bias)[:, :n_classes].float(), targets, reduction="sum")``
    without the whole logits tensor: ``h`` (..., d), ``weight`` (V, d), ``bias`` (V) or None, ``targets``
    (...) of ids below ``n_classes`` (default V) or ``ignore_index``; a 0-dim float32 sum. ``chunk`` rows
    at a time (default: as many as make :data:`ELEMENTS` logits)."""
    n = weight.shape[0] if n_classes is None else n_classes
    return _LinearCrossEntropy.apply(
        h.reshape(-1, h.shape[-1]), weight, bias, targets.reshape(-1), n, ignore_index, chunk
    )
