"""``vaswani attention`` (attention heatmaps of one sentence), ``vaswani plot`` (loss curves, of one
run or of several overlaid) and ``vaswani compare`` (runs side by side)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vaswani.cli.common import add_device_flag, add_run_command
from vaswani.cli.outputs import add_force_flag, check_output
from vaswani.errors import ConfigError
from vaswani.rundir import RunDir

LOSS_CURVES = "loss_curves.png"
RUNS = "runs.png"  # the default picture of several runs, in the current folder
POSITIONS = "positions.png"
PLOT_KINDS = ("loss", "positions")


def add_parsers(commands: Any) -> None:
    p = add_run_command(
        commands,
        "attention",
        help="draw a model's attention over one sentence",
        description="Heatmaps of the attention weights, one panel per layer and head, tokens on the axes. "
        "A translation run translates SENTENCE greedily, then draws the decoder's cross-attention "
        "(target × source) and self-attention (target × target) on that translation, or with --part "
        "encoder the encoder's self-attention (source × source); a language model draws its "
        "self-attention over SENTENCE; a BERT run (mlm, encoder, classify, tag) its self-attention over "
        "the WordPiece tokens of SENTENCE ([CLS] and [SEP] shown; a pair as A<TAB>B); an image run (ViT) "
        "draws, over the image file SENTENCE, the attention rollout of its [CLS] token over the patches "
        "(Abnar & Zuidema 2020), or with --part last the last layer's heads. Labels in "
        "Chinese, Japanese or Korean need a CJK font "
        "(pip install noto-cjk-sans-otc, or the system's fonts-noto-cjk).",
    )
    p.add_argument(
        "sentence",
        metavar="SENTENCE",
        help="the source sentence (translation), text (lm, BERT runs) or image file (image)",
    )
    p.add_argument("--out", type=Path, required=True, help="image to write (.png, .svg, .pdf...)")
    p.add_argument("--layers", "--layer", metavar="I,J", help="layers to draw, counted from 0 (default: all)")
    p.add_argument("--heads", "--head", metavar="I,J", help="heads to draw, counted from 0 (default: all)")
    p.add_argument(
        "--part",
        metavar="PART",
        help="what to draw: translation encoder, decoder-self or cross, comma-separated (default "
        "cross,decoder-self); image rollout (default) or last",
    )
    add_force_flag(p)
    add_device_flag(p)
    p.set_defaults(handler=cmd_attention)

    p = commands.add_parser(
        "plot",
        help="draw a run's loss curves (or several runs' overlaid) or its position scheme",
        usage="%(prog)s [-h] [--out OUT] [--against {step,time}] [--force] [KIND] RUN_DIR [RUN_DIR ...]",
        description="vaswani plot RUN_DIR (or plot loss RUN_DIR): training and validation loss against "
        "steps and training time, with the validation BLEU and chrF (translation) or perplexity (lm), "
        "from RUN_DIR/train_log.csv. vaswani plot A B [C ...]: the train loss, valid loss and first "
        "shared validation metric of every run against steps (--against time: training time), one "
        "line per run (default "
        f"./{RUNS}), and the table of vaswani compare. vaswani plot positions RUN_DIR: the run's "
        "position table as a "
        "heatmap (sinusoidal from the formula, learned from the weights), the mean dot product of "
        "position vectors against their distance and a few rows p·q, the title saying whether it is "
        "symmetric and falls with distance (rotary: its q·k kernel against distance).",
    )
    p.add_argument(
        "what",
        nargs="+",
        metavar="[KIND] RUN_DIR",
        help=f"KIND: {' or '.join(PLOT_KINDS)} (default loss; several runs: loss), then the runs",
    )
    p.add_argument(
        "--out",
        type=Path,
        help=f"image to write (default: RUN_DIR/{LOSS_CURVES} or {POSITIONS}; several runs: ./{RUNS})",
    )
    p.add_argument(
        "--against",
        choices=("step", "time"),  # vaswani.plots.AGAINST, not imported: it loads matplotlib
        default="step",
        help="several runs: draw their curves against steps (default) or training time, for runs "
        "given the same minutes (one run's figure has both)",
    )
    add_force_flag(p)
    p.set_defaults(handler=cmd_plot)

    p = commands.add_parser(
        "compare",
        help="several runs side by side: the config fields in which they differ, their final metrics",
        description="A table with a column per run: each config field in which the runs differ "
        "(config.json, read as vaswani reads it: a field an older run lacks takes its default) and "
        "each final metric (metrics.json). vaswani plot A B C draws their curves.",
    )
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="two runs or more")
    p.set_defaults(handler=cmd_compare)


def parse_indices(text: str | None, flag: str) -> list[int] | None:
    """``"0,2"`` → ``[0, 2]``; None (not given) → None, meaning all."""
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag}: expected numbers separated by commas, e.g. 0,1; got {text!r}") from None


def cmd_attention(args: argparse.Namespace) -> None:
    """Draw the maps of the run's kind (:data:`vaswani.inspect.attention.ATTENTION`)."""
    from vaswani.inspect.attention import ATTENTION, ImageAttention
    from vaswani.plots import attention_figure, image_attention_figure, image_kind
    from vaswani.tasks import registry

    image_kind(args.out)
    check_output(args.out, "--out", {"SENTENCE": Path(args.sentence)}, own_run=args.run_dir, force=args.force)
    layers = parse_indices(args.layers, "--layers")
    heads = parse_indices(args.heads, "--heads")
    spec = registry.spec_of(args.run_dir, list(ATTENTION), "vaswani attention")
    maps, title = ATTENTION[spec.name](spec.load(args.run_dir, device=args.device), args.sentence, args.part)
    if isinstance(maps, ImageAttention):  # an image run: the [CLS] token's attention over the image
        image_attention_figure(maps, title, out=args.out)
    else:
        attention_figure(maps, layers, heads, title=shorten(title), out=args.out)
    print(args.out)


def shorten(text: str, limit: int = 120) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plot_request(what: list[str]) -> tuple[str, list[Path]]:
    """``plot``'s words → (KIND, the run directories): ``RUN_DIR...`` (loss) or ``KIND RUN_DIR...``;
    positions takes one run."""
    kind, runs = ("loss", what) if len(what) == 1 or what[0] not in PLOT_KINDS else (what[0], what[1:])
    if len(runs) > 1 and not Path(runs[0]).is_dir():
        raise ConfigError(
            f"plot takes [KIND] RUN_DIR [RUN_DIR ...], KIND one of {', '.join(PLOT_KINDS)}; "
            f"{runs[0]!r} is neither a KIND nor a run directory"
        )
    if kind == "positions" and len(runs) > 1:
        raise ConfigError(f"plot positions takes one RUN_DIR; got {len(runs)}: {' '.join(runs)}")
    return kind, [Path(run) for run in runs]


def cmd_compare(args: argparse.Namespace) -> None:
    from vaswani.inspect.runs import compare_runs, comparison_table

    print(comparison_table(compare_runs(args.run_dirs)))


def cmd_plot(args: argparse.Namespace) -> None:
    from vaswani.inspect.positions import position_profile
    from vaswani.inspect.runs import compare_runs, comparison_table
    from vaswani.plots import image_kind, loss_curves_figure, runs_figure
    from vaswani.plots.positions import positions_figure
    from vaswani.tasks import registry

    kind, runs = plot_request(args.what)
    if args.out is not None:
        image_kind(args.out)
    if len(runs) > 1:  # their curves overlaid, and the table of compare
        out = args.out or Path(RUNS)
        check_output(out, "--out", {f"RUN_DIR {i + 1}": run for i, run in enumerate(runs)}, force=args.force)
        comparison = compare_runs(runs)
        logs = {name: RunDir(run).log for name, run in zip(comparison.names, runs, strict=True)}
        runs_figure(logs, out, args.against)
        print(comparison_table(comparison))
        print(out)
        return
    run_dir = runs[0]
    check_output(args.out, "--out", own_run=run_dir, force=args.force)
    registry.spec_of(run_dir)  # a clear error for a directory that is not a run of a known task
    if kind == "positions":
        out = args.out or run_dir / POSITIONS
        positions_figure(position_profile(run_dir), run_dir.resolve().name, out)
    else:
        out = args.out or run_dir / LOSS_CURVES
        loss_curves_figure(RunDir(run_dir).log, out)
    print(out)
