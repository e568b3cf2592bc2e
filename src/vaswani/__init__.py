"""vaswani: the Transformer family, from "Attention Is All You Need" onwards, on PyTorch.

The Python API under the ``vaswani`` command::

    from vaswani import ModelConfig, Transformer, Translator, GPT, LanguageModel
"""

from vaswani.config import ModelConfig, RunConfig, TrainConfig
from vaswani.errors import ConfigError, DataError, RunDirError, VaswaniError
from vaswani.models.gpt import GPT
from vaswani.models.transformer import Transformer
from vaswani.tasks.lm import LanguageModel, train_lm
from vaswani.tasks.translation import Translator, train_translation

__version__ = "0.1.0"

__all__ = [
    "GPT",
    "ConfigError",
    "DataError",
    "LanguageModel",
    "ModelConfig",
    "RunConfig",
    "RunDirError",
    "TrainConfig",
    "Transformer",
    "Translator",
    "VaswaniError",
    "train_lm",
    "train_translation",
]
