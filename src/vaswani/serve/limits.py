"""The bounds every generating request is checked against before any work starts: the tokens of
its inputs (``--max-prompt-tokens``), its beam (``--max-beam``), and the memory its decoding is
estimated to take (``--max-request-mib``, and what the device has free).

The estimate (:func:`decoding_bytes`) counts, at 4 bytes an element, what decoding ``rows`` =
inputs × beam (× ``n``) sequences holds at once at its longest: the self-attention keys and values
of every decoder layer over the prompt and the new tokens (``2 · layers · d_kv`` a position); for a
translation the encoder's output and the cross-attention keys and values of every decoder layer
over the source (``(1 + 2 · layers) · d_model`` a position, repeated for each beam); a position's
activations (``4 · d_model + d_ff``); and the logits of a step (three copies: logits,
log-probabilities, the beam's scores). A request past the budget is a 413 naming the field that
drives it, before anything is allocated.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import torch

from vaswani.config import ModelConfig
from vaswani.pipelines.common import model_device
from vaswani.resources import FLOAT_BYTES, memory_available
from vaswani.serve.errors import ApiError
from vaswani.serve.loading import ServedModel
from vaswani.serve.settings import ServeSettings

MIB = 2**20
LOGIT_COPIES = 3
FREE_MEMORY_SECONDS = 0.25
"""How long a reading of the memory free serves the requests after it. Reading it (``/proc/meminfo``
and the cgroup's files) took about 0.5 ms of the event loop a request, 12% of the loop's busy time
under 16 translation clients (py-spy of ``vaswani serve``, 1 thread)."""
_free_readings: dict[torch.device, tuple[float, int]] = {}  # device → (time.monotonic(), bytes)


def decoding_bytes(cfg: ModelConfig, rows: int, source: int, length: int) -> int:
    """The bytes decoding ``rows`` sequences of ``length`` positions (prompt and new tokens) takes
    with a model of ``cfg``, after a source of ``source`` tokens (0 for a language model): see the
    module docstring."""
    layers = cfg.n_decoder_layers or cfg.n_layers
    d_kv = cfg.d_model * (cfg.n_kv_heads or cfg.n_heads) // cfg.n_heads
    vocab = cfg.tgt_vocab_size or cfg.vocab_size
    per_position = 2 * layers * d_kv + 4 * cfg.d_model + cfg.d_ff
    encoded = source * ((1 + 2 * layers) * cfg.d_model + 4 * cfg.d_model + cfg.d_ff)
    return FLOAT_BYTES * rows * (length * per_position + encoded + LOGIT_COPIES * vocab)


def check_tokens(counts: Sequence[int], settings: ServeSettings, field: str) -> None:
    """Each input's token count within ``--max-prompt-tokens`` (422 naming ``field``)."""
    for i, count in enumerate(counts):
        if count > settings.max_prompt_tokens:
            where = field if len(counts) == 1 else f"{field}.{i}"
            cap = settings.max_prompt_tokens
            raise ApiError(
                422, f"{where}: {count} tokens exceed the server's --max-prompt-tokens {cap}", field
            )


def check_beam(beam: int, settings: ServeSettings) -> None:
    """``beam`` within ``--max-beam`` (a 422 naming it; ``DecodingConfig`` checks that it is >= 1)."""
    if beam > settings.max_beam:
        raise ApiError(
            422, f"beam: must be at most {settings.max_beam} (the server's --max-beam), got {beam}", "beam"
        )


def free_memory(device: torch.device) -> int:
    """:func:`~vaswani.resources.memory_available` where a model on ``device`` lives, read again only
    once the last reading is :data:`FREE_MEMORY_SECONDS` old."""
    now = time.monotonic()
    read_at, free = _free_readings.get(device, (-math.inf, 0))
    if now - read_at >= FREE_MEMORY_SECONDS:
        free = memory_available(device)
        _free_readings[device] = (now, free)
    return free


def check_memory(
    served: ServedModel, settings: ServeSettings, rows: int, source: int, length: int, field: str
) -> None:
    """Refuse with a 413 naming ``field`` a decoding whose :func:`decoding_bytes` passes
    ``--max-request-mib`` or the memory free where the model runs."""
    need = decoding_bytes(served.wrapper.model.config, rows, source, length)
    budget = int(settings.max_request_mib * MIB)
    free = free_memory(model_device(served.wrapper.model))
    if need > min(budget, free):
        limit = (
            f"the server's --max-request-mib {settings.max_request_mib:g}"
            if budget <= free
            else f"the {free / MIB:.3g} MiB free"
        )
        raise ApiError(
            413,
            f"{field}: this request would take about {need / MIB:.3g} MiB to decode ({rows} sequences of "
            f"{length} tokens), more than {limit}: ask for fewer inputs, a smaller {field} or fewer tokens",
            field,
        )
