"""Pictures of a run: loss curves from ``train_log.csv`` (one run's, or several runs' overlaid),
attention heatmaps, a ViT's attention over an image and a classifier's confusion matrix.

Figures are built on :class:`matplotlib.figure.Figure` (the Agg canvas, no pyplot state, no
display needed). Token labels in any script are drawn: a figure whose text has characters the
default font lacks (Chinese, Japanese, Korean...) is set in an installed CJK font, picked for that
figure only; the font of the ``noto-cjk-sans-otc`` package is used when it is installed. Without
such a font the figure is still written, and one line on stderr names the characters that will
show as boxes.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import math
import sys
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import matplotlib
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.ticker import LogFormatter

from vaswani.errors import ConfigError, DataError, RunDirError
from vaswani.inspect.attention import AttentionMap, ImageAttention
from vaswani.io import atomic_write

# Fonts with CJK ideographs, most common first: the installed one that draws the most missing glyphs wins.
CJK_FAMILIES = (
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Sans CJK KR", "Noto Sans SC",
    "Source Han Sans SC", "Source Han Sans CN", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
    "Droid Sans Fallback", "AR PL UMing CN", "AR PL UKai CN", "Noto Serif CJK SC", "PingFang SC",
    "Hiragino Sans GB", "Microsoft YaHei", "SimHei", "Arial Unicode MS",
)  # fmt: skip
FONT_HINT = (
    "install a font that has them: for Chinese, Japanese and Korean, pip install noto-cjk-sans-otc "
    "(or the system's fonts-noto-cjk package)"
)
MAX_TICKS = 40  # at most this many labelled tokens along an axis; longer sequences label every k-th
CELL_INCHES = 0.22  # a panel's side grows by this much per token...
PANEL_INCHES = (1.4, 4.5)  # ...between these bounds
HEAD_COLUMNS = 4  # a layer's heads wrap into rows of at most this many panels (BERT's 12: 3 rows of 4)
DPI, MAX_PIXELS = 150, 12_000  # resolution, lowered so that no side of a huge grid exceeds MAX_PIXELS


# -- fonts --------------------------------------------------------------------------------------


@functools.cache
def _register_packaged_font() -> None:
    """Make the font of the ``noto-cjk-sans-otc`` package known to matplotlib, if it is installed."""
    try:
        from noto_cjk_sans_otc import FONT_PATH  # type: ignore[import-not-found]
    except ImportError:
        return
    font_manager.fontManager.addfont(str(FONT_PATH))


def _glyphs(family: str, chars: set[str]) -> set[str]:
    """Those of ``chars`` that the installed font ``family`` draws (none if it is not installed)."""
    try:
        path = font_manager.findfont(FontProperties(family=family), fallback_to_default=False)
    except ValueError:
        return set()
    font = font_manager.get_font(path)
    return {c for c in chars if font.get_char_index(ord(c))}


def missing_glyphs(texts: Iterable[str]) -> set[str]:
    """The characters of ``texts`` that matplotlib's default font cannot draw."""
    font = font_manager.get_font(font_manager.findfont(FontProperties()))
    return {c for c in set("".join(texts)) if not c.isspace() and not font.get_char_index(ord(c))}


def cjk_font(chars: set[str]) -> tuple[str | None, set[str]]:
    """The installed CJK font family that draws the most of ``chars`` (None if none draws any),
    and the characters that it cannot draw either."""
    _register_packaged_font()
    best: str | None = None
    drawn: set[str] = set()
    for family in CJK_FAMILIES:
        found = _glyphs(family, chars)
        if len(found) > len(drawn):
            best, drawn = family, found
        if drawn == chars:
            break
    return best, chars - drawn


@contextlib.contextmanager
def _fonts_for(texts: Iterable[str], out: Path | None) -> Iterator[None]:
    """Inside: the default font, followed by a CJK font when the default one lacks glyphs of
    ``texts``. One line on stderr names the characters that no installed font draws, and
    matplotlib's warning for each of them is silenced."""
    missing = missing_glyphs(texts)
    family, undrawn = cjk_font(missing) if missing else (None, set())
    fonts = {"font.family": [*matplotlib.rcParams["font.family"], family]} if family else {}
    with warnings.catch_warnings(), matplotlib.rc_context(fonts):
        if undrawn:
            shown = "".join(sorted(undrawn)[:20]) + ("…" if len(undrawn) > 20 else "")
            where = f" in {out}" if out is not None else ""
            print(
                f"vaswani: warning: no installed font has the characters {shown} ({len(undrawn)} in all); "
                f"they show as boxes{where}; {FONT_HINT}",
                file=sys.stderr,
            )
            warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        yield


def _finish(fig: Figure, out: str | Path | None) -> Figure:
    """Lay the figure out (so that every label has its font) and write it to ``out`` if given, in
    the format its suffix names, atomically; a failed write is a one-line error."""
    if out is None:
        fig.draw_without_rendering()
        return fig
    out = Path(out)
    buffer = io.BytesIO()
    fig.savefig(buffer, format=image_kind(out), dpi=fig.dpi)
    atomic_write(out, buffer.getvalue())
    return fig


def image_kind(out: str | Path) -> str:
    """The image format that the suffix of ``out`` names (``png``...); one that matplotlib cannot
    write is a one-line :class:`ConfigError` (checked before anything is drawn)."""
    kinds = Figure().canvas.get_supported_filetypes()
    kind = Path(out).suffix.lower().lstrip(".")
    if kind not in kinds:
        known = ", ".join(f".{k}" for k in sorted(kinds))
        raise ConfigError(f"{out}: not an image format that can be written ({known})")
    return kind


# -- attention heatmaps -------------------------------------------------------------------------


def _select(chosen: Sequence[int] | None, count: int, what: str) -> list[int]:
    if chosen is None:
        return list(range(count))
    if not chosen:
        raise ConfigError(f"no {what} chosen")
    for index in chosen:
        if not 0 <= index < count:
            raise ConfigError(f"{what[:-1]} {index} is out of range: the model has {count}, 0 to {count - 1}")
    return list(chosen)


def _panel_inches(n_tokens: int) -> float:
    return min(max(CELL_INCHES * n_tokens, PANEL_INCHES[0]), PANEL_INCHES[1])


def _set_ticks(ax: Axes, labels: list[str], axis: str, show: bool) -> None:
    """Ticks on every token (every k-th of a long sequence), labelled where ``show``."""
    ticks = list(range(0, len(labels), math.ceil(len(labels) / MAX_TICKS)))
    if axis == "x":
        ax.set_xticks(ticks, [labels[t] for t in ticks], rotation=90, fontsize=7)
        ax.tick_params(axis="x", labelbottom=show)
    else:
        ax.set_yticks(ticks, [labels[t] for t in ticks], fontsize=7)
        ax.tick_params(axis="y", labelleft=show)


def attention_figure(
    maps: Sequence[AttentionMap],
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    title: str | None = None,
    out: str | Path | None = None,
) -> Figure:
    """Heatmaps of attention weights: for each map a block of panels, one band of rows per layer
    with its heads (all of them, or the chosen ``layers`` and ``heads``) wrapped at
    :data:`HEAD_COLUMNS` a row, each panel keys (x) against queries (y), weights on one 0–1 colour
    scale. Written to ``out`` when given.

    A translation gives two maps (:func:`translation_attention`), a language model one
    (:func:`lm_attention`). The figure grows with the panels and the tokens; an axis with more than
    ``MAX_TICKS`` tokens labels every k-th one. Layers and heads are numbered from 0, as the code,
    ``--layers``/``--heads`` and Hugging Face's outputs index them (the web page numbers them so too).
    """
    if not maps:
        raise ValueError("no attention maps to draw")
    layer_ids = _select(layers, min(m.n_layers for m in maps), "layers")
    head_ids = _select(heads, min(m.n_heads for m in maps), "heads")
    columns = min(len(head_ids), HEAD_COLUMNS)
    bands = math.ceil(len(head_ids) / columns)  # rows of panels per layer
    rows = len(layer_ids) * bands
    texts = [title or ""] + [label for m in maps for label in (*m.queries, *m.keys)]
    label_inches = 0.09 * max((len(label) for label in texts[1:]), default=1) + 0.3
    widths = [columns * (_panel_inches(len(m.keys)) + 0.15) for m in maps]
    heights = [rows * (_panel_inches(len(m.queries)) + 0.3) + label_inches + 0.5 for m in maps]
    size = (max(widths) + label_inches + 1.2, sum(heights) + (0.4 if title else 0.0))
    dpi = min(DPI, MAX_PIXELS / max(size))
    out_path = None if out is None else Path(out)
    with _fonts_for(texts, out_path):
        fig = Figure(figsize=size, dpi=dpi, layout="constrained")
        if title:
            fig.suptitle(title, fontsize=10)
        blocks = fig.subfigures(len(maps), 1, squeeze=False, height_ratios=heights)[:, 0]
        for block, m in zip(blocks, maps, strict=True):
            axes = block.subplots(rows, columns, squeeze=False)
            drawn = []
            for i, layer in enumerate(layer_ids):
                for j, head in enumerate(head_ids):
                    r, c = i * bands + j // columns, j % columns
                    ax = axes[r, c]
                    drawn.append(ax)
                    ax.imshow(
                        m.weights[layer, head].detach().cpu().numpy(),
                        cmap="viridis",
                        vmin=0.0,
                        vmax=1.0,
                        aspect="auto",
                        interpolation="nearest",
                    )
                    ax.set_title(f"layer {layer} · head {head}", fontsize=8)
                    below = j + columns < len(head_ids) or i + 1 < len(layer_ids)  # a panel under it
                    _set_ticks(ax, m.keys, "x", show=not below)
                    _set_ticks(ax, m.queries, "y", show=c == 0)
            for ax in axes.flat:
                if ax not in drawn:
                    ax.set_axis_off()
            block.suptitle(m.name, fontsize=11)
            block.supxlabel(m.key_axis, fontsize=8)
            block.supylabel(m.query_axis, fontsize=8)
            block.colorbar(drawn[0].images[0], ax=drawn, shrink=0.9, aspect=30, label="attention weight")
        return _finish(fig, out_path)


def image_attention_figure(attention: ImageAttention, title: str, out: str | Path | None = None) -> Figure:
    """The image beside it with its patches' attention (``attention.grid``, scaled to its maximum)
    drawn over it, each patch one cell stretched over its pixels, then one such panel per head
    when ``attention.heads`` is given (six panels a row). Written to ``out`` when given."""
    image = attention.image.permute(1, 2, 0).numpy()
    height, width = image.shape[:2]
    heads = [] if attention.heads is None else list(attention.heads)
    grids = [attention.grid, *heads]
    names = ["[CLS] attention over the patches", *(f"head {h}" for h in range(len(heads)))]
    n = 1 + len(grids)
    columns, rows = min(n, 6), math.ceil(n / 6)
    fig = Figure(figsize=(3.5 * columns, 3.9 * rows), dpi=DPI, layout="constrained")
    fig.suptitle(title, fontsize=7, wrap=True)
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    grey = {"cmap": "gray", "vmin": 0, "vmax": 255} if image.shape[2] == 1 else {}
    for ax in axes[n:]:
        ax.set_axis_off()
    for ax in axes[:n]:
        ax.imshow(image[..., 0] if image.shape[2] == 1 else image, interpolation="nearest", **grey)
        ax.set_xticks([]), ax.set_yticks([])
    for ax, grid, name in zip(axes[1:n], grids, names, strict=True):
        shown = ax.imshow(
            (grid / grid.max().clamp(min=1e-12)).numpy(),
            cmap="inferno",
            alpha=0.6,
            vmin=0.0,
            vmax=1.0,
            interpolation="nearest",
            extent=(-0.5, width - 0.5, height - 0.5, -0.5),
        )
        ax.set_title(name, fontsize=8)
    axes[0].set_title("image (as the model reads it)", fontsize=8)
    fig.colorbar(shown, ax=axes[1], shrink=0.8, label="relative attention")
    return _finish(fig, out)


def confusion_figure(
    predicted: Sequence[int], gold: Sequence[int], classes: Sequence[str], out: str | Path, title: str = ""
) -> Figure:
    """The confusion matrix of class ids ``predicted`` against ``gold``: the count of each (gold
    row, predicted column), shaded by the fraction of its row, written to ``out``."""
    n = len(classes)
    counts = [[0] * n for _ in range(n)]
    for p, g in zip(predicted, gold, strict=True):
        counts[int(g)][int(p)] += 1
    side = min(max(0.45 * n + 2.0, 4.0), 16.0)
    with _fonts_for([title, *classes], Path(out)):
        fig = Figure(figsize=(side + 1.0, side), dpi=min(DPI, MAX_PIXELS / side), layout="constrained")
        ax = fig.subplots()
        shares = [[c / max(sum(row), 1) for c in row] for row in counts]
        shown = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0, interpolation="nearest")
        if n <= 30:
            for r in range(n):
                for c in range(n):
                    colour = "white" if shares[r][c] > 0.5 else "black"
                    ax.text(c, r, str(counts[r][c]), ha="center", va="center", fontsize=7, color=colour)
        ticks = list(range(0, n, math.ceil(n / MAX_TICKS)))
        ax.set_xticks(ticks, [classes[t] for t in ticks], rotation=90, fontsize=7)
        ax.set_yticks(ticks, [classes[t] for t in ticks], fontsize=7)
        ax.set_xlabel("predicted"), ax.set_ylabel("true")
        ax.set_title(title, fontsize=9)
        fig.colorbar(shown, ax=ax, shrink=0.8, label="fraction of the true class")
        return _finish(fig, out)


# -- loss curves --------------------------------------------------------------------------------


def read_train_log(path: str | Path) -> dict[str, list[float]]:
    """The numeric columns of a run's ``train_log.csv`` (an empty cell reads as NaN; the ``kind``
    column, ``train`` or ``eval``, is left out: a row's kind shows in which of its cells are empty)."""
    path = Path(path)
    if not path.is_file():
        raise RunDirError(f"{path}: no training log (the run has not logged its first steps)")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: not a readable training log ({exc})") from None
    if not rows:
        raise DataError(f"{path}: the training log has no rows yet")
    columns: dict[str, list[float]] = {name: [] for name in rows[0] if name and name != KIND}
    for line, row in enumerate(rows, start=2):
        for name, values in columns.items():
            cell = (row.get(name) or "").strip()
            try:
                values.append(float(cell) if cell else math.nan)
            except ValueError:
                raise DataError(f"{path}:{line}: column {name!r} is not a number: {cell!r}") from None
    for needed in ("step", "seconds"):
        if needed not in columns:
            raise DataError(f"{path}: the training log has no {needed!r} column")
    return columns


KIND = "kind"  # the column of train_log.csv that says a row's kind (vaswani.training.tracking)
LOSSES = (("train_loss", "train"), ("valid_loss", "valid"))
SCORES = (("valid_bleu", "valid BLEU"), ("valid_chrf", "valid chrF"))
PERPLEXITIES = ("perplexity", "valid_ppl")


def loss_curves_figure(train_log_csv: str | Path, out_png: str | Path | None = None) -> Figure:
    """Training and validation loss against steps and against training time, and the validation
    BLEU and chrF (translation) or perplexity (language model) against training time when the log has
    them; written to ``out_png`` when given. The train loss is the mean of the steps since the row
    before (a moving average in runs written before ``train.log_every``; with label smoothing, for
    translation); the valid loss is the plain cross-entropy. Each curve joins the rows that have it."""
    path = Path(train_log_csv)
    log = read_train_log(path)
    scores = [(name, label) for name, label in SCORES if name in log]
    perplexity = next((name for name in PERPLEXITIES if name in log), None)
    n_panels = 3 if scores or perplexity else 2
    title = f"{path.resolve().parent.name}: training log ({_count(log, 'step')} rows)"
    with _fonts_for([title], None if out_png is None else Path(out_png)):
        fig = Figure(figsize=(4.3 * n_panels, 3.6), dpi=DPI, layout="constrained")
        fig.suptitle(title, fontsize=10)
        axes = fig.subplots(1, n_panels, squeeze=False)[0]
        _loss_panels(axes[0], axes[1], log)
        if n_panels == 3:
            _score_panel(axes[2], log, scores, perplexity)
        return _finish(fig, out_png)


NOT_METRICS = frozenset(
    ("step", "seconds", "lr", "train_loss", "grad_norm", "tokens_per_second", "valid_loss")
)


AGAINST = ("step", "time")  # what runs_figure's curves are drawn against


def runs_figure(
    logs: dict[str, str | Path], out_png: str | Path | None = None, against: str = "step"
) -> Figure:
    """Several runs' curves overlaid, one colour and one line per run in each panel: the train loss
    and the valid loss, and the first validation metric that every run logs (BLEU, accuracy...;
    perplexity, which the valid loss already shows, only when there is no other), against steps or,
    with ``against="time"``, against training time (runs given the same minutes, not the same
    steps). ``logs`` maps each run's name to its ``train_log.csv``; written to ``out_png`` when
    given."""
    if against not in AGAINST:
        raise ValueError(f"against must be one of {AGAINST}, not {against!r}")
    read = {name: read_train_log(path) for name, path in logs.items()}
    minutes = any(max(log["seconds"]) > 120 for log in read.values())
    x_label = "step" if against == "step" else f"training time ({'min' if minutes else 's'})"

    def x_of(log: dict[str, list[float]]) -> list[float]:
        return log["step"] if against == "step" else [s / 60 if minutes else s for s in log["seconds"]]

    first = next(iter(read.values()))
    metrics = [c for c in first if c not in NOT_METRICS and all(c in log for log in read.values())]
    shared = sorted(metrics, key=lambda c: c.endswith("ppl"))
    panels = [("train_loss", "train loss"), ("valid_loss", "valid loss")] + [(c, c) for c in shared[:1]]
    title = f"{len(read)} runs: " + ", ".join(read)
    with _fonts_for([title, *read], None if out_png is None else Path(out_png)):
        fig = Figure(figsize=(4.3 * len(panels), 3.8), dpi=DPI, layout="constrained")
        fig.suptitle(title, fontsize=10, wrap=True)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (column, label) in zip(axes, panels, strict=True):
            drawn = []
            for i, (name, log) in enumerate(read.items()):
                if column in log and _count(log, column):
                    x, y = _series(log, x_of(log), column)
                    ax.plot(x, y, marker=_marker(log, column), markersize=3, color=f"C{i % 10}", label=name)
                    drawn += y
            if column.endswith("loss") and drawn and all(v > 0 for v in drawn):
                _log_y(ax)
            ax.set_xlabel(x_label)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3, which="both")
            if drawn:
                ax.legend(fontsize=7)
        return _finish(fig, out_png)


class PlainLogFormatter(LogFormatter):
    """The ticks that matplotlib labels on a log axis, written as plain numbers (0.6, not 6e-01)."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:.3g}" if super().__call__(x, pos) else ""


def _log_y(ax: Axes) -> None:
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(PlainLogFormatter())
    ax.yaxis.set_minor_formatter(PlainLogFormatter(labelOnlyBase=False))


def _series(log: dict[str, list[float]], x: list[float], name: str) -> tuple[list[float], list[float]]:
    """The points (x, ``name``) of the rows that have ``name`` (train rows have no validation
    metrics, eval rows no train loss)."""
    pairs = [(a, b) for a, b in zip(x, log[name], strict=True) if not math.isnan(b)]
    return [a for a, _ in pairs], [b for _, b in pairs]


def _count(log: dict[str, list[float]], name: str) -> int:
    return sum(not math.isnan(v) for v in log[name])


def _marker(log: dict[str, list[float]], name: str) -> str | None:
    return "o" if _count(log, name) <= 40 else None


def _elapsed(log: dict[str, list[float]]) -> tuple[list[float], str]:
    """Training time in minutes (or seconds, for short runs) and its axis label."""
    if max(log["seconds"]) > 120:
        return [s / 60 for s in log["seconds"]], "training time (min)"
    return log["seconds"], "training time (s)"


def _loss_panels(by_step: Axes, by_time: Axes, log: dict[str, list[float]]) -> None:
    for ax, (x, x_label) in ((by_step, (log["step"], "step")), (by_time, _elapsed(log))):
        drawn = [name for name, _ in LOSSES if name in log]
        for name, label in LOSSES:
            if name in drawn:
                ax.plot(*_series(log, x, name), marker=_marker(log, name), markersize=3, label=label)
        if drawn and all(v > 0 for name in drawn for v in log[name] if not math.isnan(v)):
            _log_y(ax)
        ax.set_xlabel(x_label)
        ax.set_ylabel("loss (nats per token)")
        ax.grid(alpha=0.3, which="both")
        if drawn:
            ax.legend(fontsize=8)


def _score_panel(
    ax: Axes, log: dict[str, list[float]], scores: list[tuple[str, str]], perplexity: str | None
) -> None:
    elapsed, x_label = _elapsed(log)
    if scores:
        for name, label in scores:
            ax.plot(*_series(log, elapsed, name), marker=_marker(log, name), markersize=3, label=label)
        ax.set_ylabel("score")
        ax.legend(fontsize=8)
    elif perplexity is not None:
        points = _series(log, elapsed, perplexity)
        ax.plot(*points, marker=_marker(log, perplexity), markersize=3, color="C2")
        _log_y(ax)
        ax.set_ylabel("valid perplexity")
    ax.set_xlabel(x_label)
    ax.grid(alpha=0.3, which="both")
