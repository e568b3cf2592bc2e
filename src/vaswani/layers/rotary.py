"""Rotary positions (RoPE, Su et al. 2021): the position scheme that acts on queries and keys
(:class:`~vaswani.layers.positions.QueryKeyPositions`), in both layouts."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class RotaryPositions(nn.Module):
    """Rotary positions (RoPE, Su et al. 2021): each pair of a query's or key's features is rotated
    by an angle proportional to its position p, so that q'_i · k'_j depends on p_i − p_j only.

    Interleaved layout (the paper's, GPT-J's): the pairs are (2i, 2i+1),

        (q'_{2i}, q'_{2i+1}) = R(θ_i · p) (q_{2i}, q_{2i+1}),   θ_i = theta^(−2i / d_head),

    with R(a) the 2×2 rotation [[cos a, −sin a], [sin a, cos a]], i < d_head / 2. The half-split
    layout (Hugging Face Llama's ``rotate_half``) rotates the pairs (i, i + d_head/2) instead by
    the same θ_i · p: the same map with the features permuted (the evens first, then the odds).

    The cos/sin table ``(rows, d_head / 2)`` is fp32, built once on the device of the input for
    ``max_len`` rows (more when an id needs them, doubling) and kept (not in the state dict); the
    rotation runs in fp32 (or the input's wider type) and is cast back to the input's dtype, so
    that bf16 autocast rotates exact angles.
    """

    def __init__(self, d_head: int, max_len: int, theta: float = 10000.0, interleaved: bool = False) -> None:
        super().__init__()
        self.d_head = d_head
        self.max_len = max_len
        self.theta = theta
        self.interleaved = interleaved
        self._cos: Tensor | None = None
        self._sin: Tensor | None = None

    def table(self, length: int, device: torch.device) -> tuple[Tensor, Tensor]:
        """cos(θ_i · p) and sin(θ_i · p), fp32 (rows ≥ ``length``, d_head / 2) on ``device``: angles
        in float64 on the CPU (exact for long contexts), then cast and moved."""
        rows = 0 if self._cos is None else self._cos.shape[0]
        if self._cos is None or self._sin is None or rows < length or self._cos.device != device:
            rows = max(length, self.max_len, 2 * rows if length > rows else rows)
            inv_freq = self.theta ** (-torch.arange(0, self.d_head, 2, dtype=torch.float64) / self.d_head)
            angle = torch.arange(rows, dtype=torch.float64)[:, None] * inv_freq
            self._cos = angle.cos().float().to(device)
            self._sin = angle.sin().float().to(device)
        return self._cos, self._sin

    def rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """``x`` (batch, heads, new, d_head) rotated by the angles whose ``cos`` and ``sin``
        broadcast to (batch, heads, new, d_head / 2); same dtype as ``x``."""
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        if self.interleaved:
            even, odd = wide[..., 0::2], wide[..., 1::2]
            out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
        else:
            first, second = wide.chunk(2, dim=-1)
            out = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
        return out.to(x.dtype)

    def forward(self, q: Tensor, k: Tensor, ids: Tensor, length: int) -> tuple[Tensor, Tensor]:
        """``q``, ``k`` (batch, heads, new, d_head) at the position ids ``ids`` (batch | 1, new),
        each < ``length`` → the rotated q', k'."""
        cos, sin = self.table(length, q.device)
        cos, sin = cos[ids][:, None], sin[ids][:, None]
        return self.rotate(q, cos, sin), self.rotate(k, cos, sin)
