"""Blocked copies of the projections' weights, for compiled decoding of one or two rows.

At batch 1 a decoding step reads every weight once for two FLOPs each: its products run at the
speed the weights stream from memory. Each float32 :class:`~vaswani.layers.linear.Linear` and
each :class:`~vaswani.layers.quantize.Int8Linear` on the CPU gets its weight (int8 values for the
latter) in blocks of 16 output columns, B[b, k, j] = W[16 b + j, k]
(:func:`~vaswani.layers.kernels.blocked_weight`), which the compiled step reads in order
(:func:`~vaswani.layers.kernels.blocked_product`; when: :func:`~vaswani.layers.kernels.blocked_applies`).
The copies are attributes, not buffers: never saved, never moved with the model.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from vaswani.layers.kernels import blocked_weight
from vaswani.layers.linear import Linear
from vaswani.layers.quantize import Int8Linear

Projection = Linear | Int8Linear

__all__ = ["Projection", "block_projections", "blocked_source", "refresh_blocked"]


def blocked_source(projection: Projection) -> Tensor:
    """The weight that ``projection``'s blocked copy is made of: a float32 weight, or the int8 one."""
    return projection.weight_int8 if isinstance(projection, Int8Linear) else projection.weight


def block_projections(model: nn.Module) -> list[Projection]:
    """Give every float32 :class:`Linear` and every :class:`Int8Linear` of ``model`` on the CPU its
    blocked weight and return them: a second copy of their weights (a quarter of float32's size
    for int8 ones). A projection that has one already gets it copied again in place (another
    compiled decoding's graphs may read it, and the weight may have changed since). A weight
    changed in place afterwards needs :func:`refresh_blocked`."""
    projections: list[Projection] = [
        m
        for m in model.modules()
        if (isinstance(m, Int8Linear) or (isinstance(m, Linear) and m.weight.dtype == torch.float32))
        and blocked_source(m).device.type == "cpu"
    ]
    with torch.inference_mode(False):  # a normal tensor, which refresh_blocked may update in any mode
        for projection in projections:
            if projection.blocked is None:
                projection.blocked = blocked_weight(blocked_source(projection))
            else:
                refresh_blocked(projection)
    return projections


def refresh_blocked(projection: Projection) -> None:
    """Copy ``projection``'s weight into its blocked copy again, in place (the compiled graphs keep
    reading the same tensor)."""
    assert projection.blocked is not None
    with torch.inference_mode(False), torch.no_grad():
        projection.blocked.copy_(blocked_weight(blocked_source(projection)))
