"""A run's position scheme as numbers: what ``vaswani plot positions`` draws.

For an absolute table P (max_len, d) (sinusoidal, from its formula; learned, from the run's
weights) the dot products G = P Pᵀ of position vectors are read against their distance: the mean
of p·(p+k) over the pairs at each distance k, and whole rows p·q against q − p. The paper's
sinusoids give p·(p+k) = Σ_i cos(k ω_i), the same for every p: symmetric in k (p·(p+k) =
p·(p−k)) and falling, with ripples, as k grows; a learned table need not be either.

Rotary positions have no table: a query and a key at distance k meet through the rotation R_k, and
for one vector of equal norm in each rotated pair q · R_k q / |q|² = mean_i cos(k θ_i), θ_i =
rope_theta^(−2i / d_head): the kernel drawn against k. ALiBi and relative positions act in
attention's scores and have neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from vaswani.config import POSITIONS, ROTARY
from vaswani.errors import RunDirError
from vaswani.layers.embedding import Embeddings
from vaswani.layers.positions import SCHEMES
from vaswani.rundir import RunDir
from vaswani.tasks import registry

SYMMETRIC = 1e-3  # |p·(p+k) − p·(p−k)| below this share of max |p·q|: symmetric
FALLS = -0.5  # Spearman's ρ between the distance and the mean dot product below this: it falls


@dataclass(frozen=True)
class PositionProfile:
    """The dot products of a run's position vectors against their distance.

    ``table`` (max_len, d) float64, None for rotary; ``by_distance`` (max_len,): the mean of
    p·(p+k) over the pairs at distance k = 0, 1, … (rotary: the kernel mean_i cos(k θ_i));
    ``rows``: for a few positions p, p·q for every q (max_len,), plotted against q − p;
    ``asymmetry``: max |p·(p+k) − p·(p−k)| over p and k, as a share of max |p·q|; ``rho``:
    Spearman's rank correlation of k and ``by_distance``; ``monotone``: the distance up to which
    ``by_distance`` falls at every step."""

    scheme: str
    origin: str
    table: Tensor | None
    by_distance: Tensor
    rows: dict[int, Tensor]
    asymmetry: float
    rho: float
    monotone: int

    @property
    def symmetric(self) -> bool:
        return self.asymmetry <= SYMMETRIC

    @property
    def falls(self) -> bool:
        return self.rho < FALLS

    def verdict(self) -> str:
        """One line: whether the dot product is symmetric and falls with distance, with the numbers."""
        yes = {True: "yes", False: "no"}
        return (
            f"symmetric: {yes[self.symmetric]} (max |p·(p+k) − p·(p−k)| = {self.asymmetry:.1%} of max); "
            f"falls with distance: {yes[self.falls]} (Spearman ρ = {self.rho:+.2f}, "
            f"at every step up to {self.monotone})"
        )


def spearman(x: Tensor, y: Tensor) -> float:
    """Spearman's rank correlation of two 1-D tensors (ranks by order, ties broken by position)."""
    rank_x, rank_y = x.argsort().argsort().double(), y.argsort().argsort().double()
    rank_x, rank_y = rank_x - rank_x.mean(), rank_y - rank_y.mean()
    return float((rank_x * rank_y).sum() / (rank_x.norm() * rank_y.norm()).clamp(min=1e-12))


def monotone_until(curve: Tensor) -> int:
    """The largest k such that ``curve`` falls at every step from 0 to k."""
    rises = (curve[1:] >= curve[:-1]).nonzero()
    return int(rises[0]) if len(rises) else len(curve) - 1


def profile(scheme: str, origin: str, table: Tensor, n_rows: int = 4) -> PositionProfile:
    """The profile of the absolute table ``table`` (max_len, d); ``n_rows`` rows p·q, evenly spaced."""
    table = table.double()
    length = table.shape[0]
    dots = table @ table.T
    by_distance = torch.stack([dots.diagonal(k).mean() for k in range(length)])
    asymmetry = 0.0
    for k in range(1, (length + 1) // 2):  # p·(p+k) against p·(p−k), at every p that has both
        ahead, behind = dots.diagonal(k)[k : length - k], dots.diagonal(k)[: length - 2 * k]
        asymmetry = max(asymmetry, float((ahead - behind).abs().max()))
    rows = {p: dots[p] for p in range(0, length, max(1, length // n_rows))[:n_rows]}
    distance = torch.arange(length, dtype=torch.float64)
    return PositionProfile(
        scheme,
        origin,
        table,
        by_distance,
        rows,
        asymmetry / float(dots.abs().max()),
        spearman(distance, by_distance),
        monotone_until(by_distance),
    )


def rotary_profile(scheme: str, d_head: int, max_len: int, theta: float) -> PositionProfile:
    """The rotary kernel mean_i cos(k θ_i), θ_i = theta^(−2i / d_head), at k = 0 … max_len − 1."""
    inv_freq = theta ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    distance = torch.arange(max_len, dtype=torch.float64)
    kernel = torch.cos(distance[:, None] * inv_freq).mean(dim=1)
    origin = f"rotary (d_head {d_head}, θ = {theta:g}): q · R_k q / |q|² = mean_i cos(k θ_i)"
    return PositionProfile(
        scheme, origin, None, kernel, {}, 0.0, spearman(distance, kernel), monotone_until(kernel)
    )


def position_profile(run_dir: str | Path) -> PositionProfile:
    """The profile of the positions of the run ``run_dir``: the first absolute table of its model
    (a translation run's source embedding), sinusoidal from its formula, learned from its weights;
    rotary from its formula. A scheme without either is a one-line :class:`RunDirError`."""
    spec = registry.spec_of(run_dir)
    run = RunDir(run_dir).read_config(spec.name, spec.data)
    cfg = run.model
    if cfg.position in ROTARY:
        return rotary_profile(cfg.position, cfg.d_model // cfg.n_heads, cfg.max_len, cfg.rope_theta)
    tables = []
    if SCHEMES[cfg.position].embedding is not None:
        model = RunDir(run_dir).load_weights(spec.model(run))
        tables = [
            m.positions for m in model.modules() if isinstance(m, Embeddings) and m.positions is not None
        ]
    if not tables:
        raise RunDirError(
            f"{run_dir}: positions {cfg.position!r} of a run of task {run.task!r} are not a table of "
            "token positions (they act in attention's scores, or over an image's patches): nothing to draw"
        )
    which = "the source embedding's " if len(tables) > 1 else ""
    source = "the run's weights" if POSITIONS[cfg.position].stored else "the formula"
    return profile(cfg.position, f"{which}{cfg.position} table, from {source}", tables[0].table_values())
