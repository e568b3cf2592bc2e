"""ViT folders both ways: ``import-hf`` of a ``ViTForImageClassification`` folder into an ``image`` run and
``export-hf`` of one (the config conversion and key table are :mod:`vaswani.interop.vit`'s).

A run keeps the image processor's settings as Hugging Face's ``preprocessor_config.json``
(:class:`~vaswani.data.images.ImageProcessing`), which ``classify-image`` reads: an import copies the
folder's (one without it gets ``ViTImageProcessor``'s defaults at the model's ``image_size``), an export
writes the run's. The class names are the checkpoint's ``id2label``. An imported run has no images of
its own (its data ``source`` is ``"imported"``), so ``vaswani evaluate`` wants ``--data DIR`` for it. A
``ViTModel`` folder (no classifier) becomes a run without classes: an encoder that ``vaswani train
image --init RUN_DIR --data DIR`` fine-tunes with a new classifier, and that exports as a ``ViTModel``
again; ``classify-image`` refuses it in one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vaswani.config import ModelConfig, RunConfig
from vaswani.data.config import ImageData
from vaswani.data.images import PREPROCESSOR, ImageProcessing
from vaswani.errors import ConfigError, DataError
from vaswani.interop import fields
from vaswani.interop.common import naming, read_hf_weights, save_run, write_json, write_safetensors
from vaswani.interop.vit import (
    BASE_ARCH,
    CONFIG_TABLE,
    HEAD_ARCH,
    class_names,
    config_from_hf,
    config_to_hf,
    n_classes_of,
    state_from_hf,
    state_to_hf,
)
from vaswani.pipelines.image import TASK, model_of
from vaswani.rundir import RunDir
from vaswani.tasks import registry


def read_processing(src: Path, cfg: ModelConfig) -> ImageProcessing:
    """The image processor of the folder ``src`` (its ``preprocessor_config.json``, or
    ``ViTImageProcessor``'s defaults at ``cfg.image_size``), refused naming the field when its images
    do not fit the model: another channel count, a size that is no multiple of the patch size."""
    path = src / PREPROCESSOR
    if not path.is_file():
        side, channels = cfg.image_size, cfg.channels
        return ImageProcessing(size=(side, side), image_mean=(0.5,) * channels, image_std=(0.5,) * channels)
    processing = ImageProcessing.load(src)
    if processing.channels != cfg.channels:
        raise ConfigError(
            f"{path}: 'image_mean' has {processing.channels} channels, the model "
            f"{cfg.channels} (num_channels)"
        )
    if processing.do_resize and any(side % cfg.patch_size for side in processing.size):
        raise ConfigError(
            f"{path}: 'size' {list(processing.size)} is not a multiple of the model's "
            f"patch_size {cfg.patch_size}"
        )
    return processing


def import_folder(src: Path, hf_config: Mapping[str, Any], out: Path) -> None:
    """Write a vaswani ``image`` run into ``out`` from the ``ViTForImageClassification`` (or
    ``ViTModel``) folder ``src``: ``config.json`` (the classes from ``id2label``; none without a
    classifier), the weights, ``preprocessor_config.json``."""
    config_path = src / RunDir.CONFIG
    with naming(config_path, ConfigError):
        cfg = fields.fitting(config_from_hf(hf_config), CONFIG_TABLE)
    tensors, weights_path = read_hf_weights(src)
    n_classes = n_classes_of(tensors)
    if n_classes == 1:
        raise DataError(
            f"{weights_path}: a classifier of 1 class; vaswani imports a {HEAD_ARCH} of two or more "
            f"classes, or a {BASE_ARCH}"
        )
    with naming(config_path, ConfigError):
        classes = class_names(hf_config, n_classes)
    processing = read_processing(src, cfg)
    with naming(weights_path, DataError):
        state = state_from_hf(tensors, cfg)
    run = RunConfig(
        TASK, cfg, registry.configure(TASK).train, ImageData(source="imported", classes=tuple(classes))
    )
    save_run(out, run, model_of(run), state)
    processing.save(out)


def export_run(run_dir: Path, run: RunConfig, out: Path) -> None:
    """Write a Hugging Face ``ViTForImageClassification`` folder (a ``ViTModel`` for a run without
    classes) into ``out`` from the ``image`` run ``run_dir``: ``config.json`` (``id2label`` the run's
    classes), ``model.safetensors`` and the run's ``preprocessor_config.json``. (``run`` is read again
    with the image task's data section.)"""
    run = RunDir(run_dir).read_config(TASK, ImageData)
    classes = run.data.classes or ()
    with naming(run_dir / RunDir.CONFIG, ConfigError):
        hf_config = config_to_hf(run.model, classes)
    processing = ImageProcessing.load(run_dir)
    model = RunDir(run_dir).load_weights(model_of(run))
    write_json(out / RunDir.CONFIG, hf_config)
    write_safetensors(out / RunDir.WEIGHTS, state_to_hf(model.state_dict(), run.model))
    processing.save(out)
