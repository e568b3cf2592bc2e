"""vaswani: the Transformer family, from "Attention Is All You Need" onwards, on PyTorch.

The Python API under the ``vaswani`` command::

    from vaswani import ModelConfig, Transformer, Translator, GPT, LanguageModel

    run = vaswani.configure("translation", {"train": {"max_steps": 500}})   # the recipe < your settings
    metrics, translator, _ = vaswani.train(run, "runs/zh")
    vaswani.load("runs/zh").translate(["Tom chases Jerry"])                 # any run, by its task

Each name is imported from its module when it is first asked for (PEP 562), so that
``import vaswani.layers`` loads the core alone, not the tasks with their tokenizers, sacrebleu
and tqdm.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

HOMES = {
    "RunDir": "vaswani.rundir",
    "configure": "vaswani.tasks.registry",
    "load": "vaswani.tasks.registry",
    "resume": "vaswani.tasks.lifecycle",
    "train": "vaswani.tasks.lifecycle",
    "ConfigError": "vaswani.errors",
    "DataError": "vaswani.errors",
    "GPT": "vaswani.models.gpt",
    "ImageClassifier": "vaswani.pipelines.image",
    "LanguageModel": "vaswani.pipelines.lm",
    "MaskedLanguageModel": "vaswani.pipelines.mlm",
    "SentenceEncoder": "vaswani.pipelines.encoder",
    "Tagger": "vaswani.pipelines.tag",
    "TextClassifier": "vaswani.pipelines.classify",
    "ModelConfig": "vaswani.config",
    "RunConfig": "vaswani.config",
    "RunDirError": "vaswani.errors",
    "TrainConfig": "vaswani.config",
    "Transformer": "vaswani.models.transformer",
    "Translator": "vaswani.pipelines.translation",
    "ViT": "vaswani.models.vit",
    "VaswaniError": "vaswani.errors",
    "train_lm": "vaswani.tasks.lm",
    "train_translation": "vaswani.tasks.translation",
}
"""Each public name → the module that defines it."""

__all__ = sorted(HOMES)


def __getattr__(name: str) -> Any:
    """The public ``name``, imported from its module on first use and kept."""
    if name not in HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
