"""The models a server serves: every run directory loaded at start through the task registry.

``load_models(run_dirs, device) -> dict[str, ServedModel]``, keyed by the model id (the run
directory's name; a second run of the same name gets ``-2``, ``-3``...). A run that does not
load raises its one-line :class:`~vaswani.errors.VaswaniError` naming it, before any port is
bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vaswani.errors import RunDirError, VaswaniError
from vaswani.layers.quantize import prepare_weights
from vaswani.pipelines.chat import ChatTemplate
from vaswani.pipelines.common import Pipeline, check_inference_weights
from vaswani.tasks import registry

# The endpoints that serve each task's runs (besides /v1/models and /health).
ENDPOINTS: dict[str, tuple[str, ...]] = {
    "lm": ("/v1/completions", "/v1/chat/completions", "/v1/attention"),
    "translation": ("/v1/translations", "/v1/attention"),
    "mlm": ("/v1/fill-mask",),
    "encoder": ("/v1/embeddings",),
    "classify": ("/v1/classifications",),
    "tag": ("/v1/tags",),
    "image": ("/v1/images/classifications",),
}


@dataclass
class ServedModel:
    """One loaded run: its id, task, wrapper (``registry.load``'s) and directory; an lm run's chat
    template (its own, or the plain default)."""

    name: str
    task: str
    wrapper: Pipeline
    run_dir: Path
    chat: ChatTemplate | None = None

    @property
    def endpoints(self) -> tuple[str, ...]:
        return ENDPOINTS.get(self.task, ())


def load_models(
    run_dirs: Sequence[str | Path],
    device: str = "auto",
    quantize: str | None = None,
    dtype: str | None = None,
    compile: bool = False,
) -> dict[str, ServedModel]:
    """Every run of ``run_dirs`` loaded on ``device``, its weights as ``quantize`` and ``dtype`` say
    (:func:`~vaswani.layers.quantize.prepare_weights`); the first that fails raises its one line.
    With ``compile`` (``serve --compile``) the lm and translation wrappers compile their decoding
    steps (``compile_decoding``): their continuous-batching engines (completions, greedy and sampled
    translations) then step on static caches through one graph per bucket, and so does a
    translation's beam search."""
    if not run_dirs:
        raise RunDirError("vaswani serve needs at least one run directory")
    models: dict[str, ServedModel] = {}
    for run_dir in map(Path, run_dirs):
        try:
            spec = registry.spec_of(run_dir)
            check_inference_weights(spec.name, run_dir, quantize, dtype)
            wrapper = spec.load(run_dir, device=device)
            if quantize is not None or dtype is not None:
                prepare_weights(wrapper.model, quantize, dtype)
            if compile and hasattr(wrapper, "compile_decoding"):
                wrapper.compile_decoding()
            chat = ChatTemplate.load(run_dir, wrapper.tokenizer) if spec.name == "lm" else None
        except VaswaniError as exc:
            message = str(exc)
            raise type(exc)(message if str(run_dir) in message else f"{run_dir}: {message}") from None
        name, number = run_dir.resolve().name, 2
        while name in models:
            name, number = f"{run_dir.resolve().name}-{number}", number + 1
        models[name] = ServedModel(name, spec.name, wrapper, run_dir, chat)
    return models
