"""Hugging Face-format checkpoints: import them as vaswani run directories, export runs to them.

One module per model family holds its key-mapping table, used in both directions
(:mod:`vaswani.interop.gpt2`, :mod:`vaswani.interop.llama`, :mod:`vaswani.interop.marian`,
:mod:`vaswani.interop.bert`, :mod:`vaswani.interop.vit`);
:mod:`vaswani.interop.common` has what they share; :mod:`vaswani.interop.peft` writes a LoRA run's
adapters in PEFT's format, by those tables. Imports are
chosen by the ``model_type`` of the folder's ``config.json`` (:data:`IMPORTERS`), exports by the
Hugging Face family that the run's task names in the task registry (``hf_family``,
:data:`EXPORTERS`): a language model is written as Llama when its positions are rotary, else as
GPT-2. The output folder is written beside its final place
and renamed into it, so that it appears complete or not at all; an existing non-empty one is
refused, never overwritten.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vaswani.config import ROTARY, RunConfig
from vaswani.errors import ConfigError, RunDirError
from vaswani.interop import (
    bert,
    bert_folder,
    gpt2,
    llama,
    llama_folder,
    marian,
    marian_folder,
    vit,
    vit_folder,
)
from vaswani.interop.common import new_folder, read_hf_config
from vaswani.rundir import RunDir
from vaswani.tasks import registry

Importer = Callable[[Path, Mapping[str, Any], Path], None]
"""(Hugging Face folder, its config.json, output folder to fill) → None."""
Exporter = Callable[[Path, RunConfig, Path], None]
"""(run directory, its config, output folder to fill) → None."""

IMPORTERS: dict[str, Importer] = {
    bert.MODEL_TYPE: bert_folder.import_folder,
    gpt2.MODEL_TYPE: gpt2.import_folder,
    llama.MODEL_TYPE: llama_folder.import_folder,
    marian.MODEL_TYPE: marian_folder.import_folder,
    vit.MODEL_TYPE: vit_folder.import_folder,
}


def export_decoder(run_dir: Path, run: RunConfig, out: Path) -> None:
    """A language model as Llama (:mod:`~vaswani.interop.llama_folder`) when its positions are
    rotary, else as GPT-2 (:mod:`~vaswani.interop.gpt2`)."""
    exporter = llama_folder.export_run if run.model.position in ROTARY else gpt2.export_run
    exporter(run_dir, run, out)


EXPORTERS: dict[str, tuple[str, Exporter]] = {
    gpt2.MODEL_TYPE: ("GPT-2, or Llama with rotary positions", export_decoder),
    marian.MODEL_TYPE: ("Marian", marian_folder.export_run),
    bert.MODEL_TYPE: ("BERT", bert_folder.export_run),
    vit.MODEL_TYPE: ("ViTForImageClassification", vit_folder.export_run),
}
"""Hugging Face family (a task's ``hf_family``) → (its name, its exporter)."""


def import_hf(src_dir: Path, out_dir: Path) -> Path:
    """Convert the Hugging Face model folder ``src_dir`` into the vaswani run directory ``out_dir``
    (a new or empty folder) and return it."""
    src_dir, out_dir = Path(src_dir), Path(out_dir)
    hf_config = read_hf_config(src_dir)
    model_type = hf_config.get("model_type")
    if not isinstance(model_type, str) or model_type not in IMPORTERS:
        raise ConfigError(
            f"{src_dir / RunDir.CONFIG}: model_type {model_type!r} is not supported; "
            f"supported: {', '.join(sorted(IMPORTERS))}"
        )
    with new_folder(out_dir) as tmp:
        IMPORTERS[model_type](src_dir, hf_config, tmp)
    return out_dir


def export_hf(run_dir: Path, out_dir: Path) -> Path:
    """Write the vaswani run ``run_dir`` as a Hugging Face model folder ``out_dir`` (a new or empty
    folder) and return it."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    run = RunDir(run_dir).read_config()
    spec = registry.TASKS.get(run.task)
    family = spec.hf_family if spec else None
    if family is None:
        supported = ", ".join(
            f"{spec.name} (as {EXPORTERS[spec.hf_family][0]})"
            for spec in registry.TASKS.values()
            if spec.hf_family is not None
        )
        raise RunDirError(
            f"{run_dir}: runs of task {run.task!r} cannot be exported yet; supported: {supported}"
        )
    if run.model.arch == "rnn":
        raise RunDirError(
            f"{run_dir}: an RNN translator (--arch rnn) has no Hugging Face format to export to"
        )
    with new_folder(out_dir) as tmp:
        EXPORTERS[family][1](run_dir, run, tmp)
    return out_dir
