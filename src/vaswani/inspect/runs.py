"""Several runs side by side: the config fields in which they differ and their final metrics, what
``vaswani compare`` prints (and ``vaswani plot A B ...`` under its picture of their curves)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vaswani.errors import ConfigError
from vaswani.rundir import RunDir
from vaswani.tasks import registry

MISSING = "-"  # a field or a metric that a run does not have


@dataclass(frozen=True)
class Comparison:
    """``names`` (each run as it was given), then for each config field in which the runs differ
    and for each final metric (``metrics.json``; numbers only) one value per run (None: missing)."""

    names: list[str]
    differing: dict[str, list[Any]]
    metrics: dict[str, list[float | int | None]]


def run_fields(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.json`` as dotted fields (``train.lr``, ``model.d_model``...), read as
    vaswani reads it (fields an older run lacks take their defaults)."""
    spec = registry.spec_of(run_dir)
    run = RunDir(run_dir).read_config(spec.name, spec.data)
    fields: dict[str, Any] = {"task": run.task}
    sections = {"model": run.model, "train": run.train, "data": run.data}
    for section, config in sections.items():
        if config is not None:
            fields.update({f"{section}.{name}": value for name, value in config.to_dict().items()})
    return fields


def compare_runs(run_dirs: Sequence[str | Path]) -> Comparison:
    """The runs' differing config fields (in the order of the first run that has each) and final
    metrics; fewer than two runs is a one-line :class:`ConfigError`."""
    if len(run_dirs) < 2:
        raise ConfigError(f"compare needs two runs or more; got {len(run_dirs)}")
    seen = [Path(run).resolve() for run in run_dirs]
    twice = next((run for run, path in zip(run_dirs, seen, strict=True) if seen.count(path) > 1), None)
    if twice is not None:
        raise ConfigError(f"{twice}: the same run given twice")
    configs = [run_fields(Path(run)) for run in run_dirs]
    finals = [RunDir(run).read_metrics() for run in run_dirs]
    fields = {name: [c.get(name) for c in configs] for config in configs for name in config}
    differing = {name: values for name, values in fields.items() if len({repr(v) for v in values}) > 1}
    metric_names = dict.fromkeys(k for final in finals for k, v in final.items() if _is_number(v))
    metrics = {name: [_number(final.get(name)) for final in finals] for name in metric_names}
    return Comparison([str(run) for run in run_dirs], differing, metrics)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number(value: Any) -> float | int | None:
    return value if _is_number(value) else None


def _cell(value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, float):
        return f"{value:.4g}" if not math.isfinite(value) or abs(value) < 1e4 else f"{value:.0f}"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value)
    return str(value)


def comparison_table(comparison: Comparison) -> str:
    """The comparison as aligned text: a column per run, a row per differing field (under
    ``config``) and per final metric (under ``final metrics``)."""
    sections = (
        ("config", comparison.differing, "config: no field differs"),
        ("final metrics", comparison.metrics, "final metrics: none (no metrics.json yet)"),
    )
    rows: list[list[str]] = [["", *comparison.names]]
    for title, values, empty in sections:
        rows.append([title if values else empty])
        rows += [[f"  {name}", *(_cell(v) for v in cells)] for name, cells in values.items()]
    table = [row for row in rows if len(row) > 1]
    widths = [max(len(row[i]) for row in table) for i in range(len(rows[0]))]
    return "\n".join(
        row[0] if len(row) == 1 else "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
