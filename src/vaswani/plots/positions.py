"""The picture of a run's position scheme (:mod:`vaswani.inspect.positions`): its table as a heatmap,
the mean dot product of position vectors against their distance, and a few rows p·q against q − p;
the title says whether the dot product is symmetric and falls with distance."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from vaswani.inspect.positions import PositionProfile
from vaswani.plots import DPI, _finish


def positions_figure(profile: PositionProfile, title: str, out: str | Path | None = None) -> Figure:
    """Three panels for an absolute table (the table, positions × dimensions, its colours clipped at
    the 99th percentile of |P|; the mean of p·(p+k)
    against k; the rows p·q against q − p), one for rotary positions (the kernel against k), under
    ``title`` and the profile's verdict. Written to ``out`` when given."""
    n_panels = 3 if profile.table is not None else 1
    fig = Figure(figsize=(4.6 * n_panels, 4.0), dpi=DPI, layout="constrained")
    fig.suptitle(f"{title}: {profile.origin}\n{profile.verdict()}", fontsize=8)
    axes = fig.subplots(1, n_panels, squeeze=False)[0]
    distance = list(range(len(profile.by_distance)))
    if profile.table is not None:
        scale = (
            float(profile.table.abs().flatten().quantile(0.99)) or 1.0
        )  # a few outliers do not wash it out
        shown = axes[0].imshow(
            profile.table.numpy(),
            cmap="RdBu_r",
            aspect="auto",
            interpolation="nearest",
            vmin=-scale,
            vmax=scale,
        )
        axes[0].set_xlabel("dimension")
        axes[0].set_ylabel("position")
        axes[0].set_title("position vectors", fontsize=9)
        fig.colorbar(shown, ax=axes[0], shrink=0.8)
        for p, row in profile.rows.items():
            axes[2].plot([q - p for q in range(len(row))], row.numpy(), linewidth=1, label=f"p = {p}")
        axes[2].axvline(0, color="grey", linewidth=0.5)
        axes[2].set_xlabel("q − p")
        axes[2].set_ylabel("p · q")
        axes[2].set_title("rows of the dot products", fontsize=9)
        axes[2].legend(fontsize=7)
        axes[2].grid(alpha=0.3)
    curve = axes[1] if profile.table is not None else axes[0]
    curve.plot(distance, profile.by_distance.numpy(), color="C3")
    curve.set_xlabel("distance k")
    curve.set_ylabel("mean p · (p + k)" if profile.table is not None else "q · R_k q / |q|²")
    curve.set_title("dot product against distance", fontsize=9)
    curve.grid(alpha=0.3)
    return _finish(fig, out)
