"""Decoding steps through ``torch.compile`` on a static KV cache, as gpt-fast does.

A decoding step (the step's token ids (rows, 1), the cache and what else the model reads) is
compiled with ``dynamic=False`` and ``fullgraph=True``: every shape in it is fixed by its
*bucket*, the rows padded up to a power of two (:func:`bucket`) and the cache a
:class:`~vaswani.layers.cache.StaticKVCache` of a power-of-two number of columns (at least
:data:`SMALLEST_BUFFER`, at most the model's ``max_len``) that holds the prompt and the budget,
its position a tensor. Prompts of any length and batches of any size within a bucket therefore
reuse one graph. A language model's prefill (its prompt) runs eagerly, once per call; the steps
after it run the graph; a translation's encoder is a graph of its own and its first step runs
through a step graph too (the cross-attention caches primed before it). The
next-token functions built here are :data:`~vaswani.generation.sampling.NextLogits`, so greedy
search and sampling are :func:`~vaswani.generation.sampling.generate`'s own, through the same
``choose_next`` and generator: the ids are eager's wherever the logits are.

Where compilation cannot work (:func:`vaswani.runtime.compile_unsupported`, checked up front) or a
step fails to compile, one line on stderr says why and decoding goes on eagerly, for good; a
graph runs whole or not at all (``fullgraph``), so the failing step is redone eagerly on an
untouched cache. The first run of each bucket's graph (compilation and one step) is counted apart
in :attr:`CompiledDecoding.compile_seconds`.
"""

from __future__ import annotations

import sys
import time
import types
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from vaswani.errors import VaswaniError
from vaswani.generation.beam import Reorderable
from vaswani.generation.sampling import NextLogits
from vaswani.layers.blocked import Projection, block_projections, blocked_source, refresh_blocked
from vaswani.layers.kernels import BLOCKED_ROWS
from vaswani.models.gpt import GPT
from vaswani.models.transformer import EncodedSource, Transformer
from vaswani.runtime import CompileBackend, compile_failure, compile_unsupported

BACKEND: CompileBackend = "inductor"
"""What ``--compile`` compiles decoding steps with."""
SMALLEST_BUFFER = 64
"""The fewest columns of a static cache: short generations share the graph of 64."""
RECOMPILE_LIMIT = 256
"""Graphs dynamo keeps per step function: its default of 8 would be reached by a server's buckets
(rows × columns, and a translator's source columns: up to about a hundred for one model)."""


Out = TypeVar("Out")
ModelState = tuple[bool, torch.dtype]  # a model's training flag and its parameters' dtype


def bucket(n: int, smallest: int = 1) -> int:
    """The smallest power of two >= ``n`` and >= ``smallest``."""
    size = smallest
    while size < n:
        size *= 2
    return size


def _lm_step(model: GPT, tokens: Tensor, mask: Tensor, cache: list[Any]) -> Tensor:
    """A decoder-only model's next-token logits (rows, vocab) after ``tokens`` (rows, 1)."""
    return model(tokens, attention_mask=mask, cache=cache, last_only=True)[:, -1]


def _seq2seq_encode(model: Transformer, src: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
    """The encoder's output (rows, src_len, d_model) of ``src`` (rows, src_len) and each decoder
    layer's cross-attention keys and values of it."""
    memory = model.encode(src).memory
    return memory, model.decoder.cross_keys_values(memory)


def _seq2seq_step(
    model: Transformer, tokens: Tensor, source: EncodedSource, target_mask: Tensor | None = None
) -> Tensor:
    """An encoder-decoder's next-token logits (rows, vocab) after ``tokens`` (rows, 1); with
    ``target_mask`` (rows, columns), left-padded decoder rows (continuous batching)."""
    return model.decode(tokens, source, last_only=True, target_mask=target_mask)[0][:, -1]


class CompiledDecoding:
    """The compiled decoding steps of one model: ``torch.compile`` with ``backend`` (and ``mode``,
    e.g. ``"reduce-overhead"`` for CUDA graphs), its graphs kept for every later call.

    Without a ``mode``, a graph is run without dynamo's guards on the model's modules (its
    parameters, attributes and submodules: ``torch.compiler.skip_guard_on_all_nn_modules_unsafe``),
    which it would otherwise check at every step; the tensors passed in keep theirs, so the buckets'
    graphs are still told apart. That is safe because the graphs are this object's alone and its
    model cannot change under them: each step function is compiled from a copy with a code object
    of its own (:func:`own_copy`: dynamo keeps graphs per code object, so no other instance's
    model can match them), and every run checks that the model is the one of the first run, in
    the same mode and dtype (:class:`ModelChanged` otherwise). Batch-1 greedy translation with the
    embedded job's 2 + 2-layer model: 1,134 → 1,324 tokens/s (medians of eight passes each, in
    turn in one process, AMD EPYC, one thread), as the guards were about a seventh of a step.

    ``failure`` is why decoding runs eagerly (None while compilation works); ``compile_seconds``
    the time of each bucket's first step (its compilation); ``buckets`` the shapes compiled."""

    def __init__(self, backend: CompileBackend | None = None, mode: str | None = None) -> None:
        self.backend, self.mode = BACKEND if backend is None else backend, mode
        self.failure: str | None = None
        self.compile_seconds = 0.0
        self.buckets: set[tuple[Any, ...]] = set()
        self._steps: dict[Callable[..., Any], Callable[..., Any]] = {}
        # The bound model, its first parameter (whose dtype ``.to()`` changes in place: reading it
        # there spares walking the modules at every step) and its (training, dtype) then.
        self._model: tuple[weakref.ref[torch.nn.Module], weakref.ref[Tensor], ModelState] | None = None
        # The projections given blocked weights (at the first bucket of at most BLOCKED_ROWS rows)
        # with each weight's version counter then: an in-place change moves it.
        self._blocked: list[tuple[Projection, int]] | None = None

    @classmethod
    def where_supported(
        cls, device: torch.device, backend: CompileBackend | None = None, mode: str | None = None
    ) -> CompiledDecoding | None:
        """A :class:`CompiledDecoding`, or None after one line on stderr where a cheap check shows
        that ``backend`` (default :data:`BACKEND`) cannot work for a model on ``device``."""
        reason = compile_unsupported(device, BACKEND if backend is None else backend)
        if reason is not None:
            say_fallback(f"torch.compile does not work here ({reason})")
            return None
        return cls(backend, mode)

    def run(self, step: Callable[..., Out], key: tuple[Any, ...], *args: Any) -> Out:
        """``step(*args)`` through its compiled graph (``key``: the bucket, its kind then its rows),
        or eagerly once compilation has failed (after one line on stderr). Before the first bucket
        of at most :data:`~vaswani.layers.kernels.BLOCKED_ROWS` rows is compiled, the model's
        projections get their blocked weights (:func:`~vaswani.layers.blocked.block_projections`),
        which that bucket's graph reads; a weight changed in place since is copied into them again
        before the next step."""
        if self.failure is not None:
            return step(*args)
        self._check_model(args[0])
        if self._blocked is None and key[1] <= BLOCKED_ROWS:
            self._blocked = [(p, blocked_source(p)._version) for p in block_projections(args[0])]
        elif self._blocked:
            self._follow_weights()
        compiled = self._steps.get(step)
        if first := key not in self.buckets:  # dynamo's settings are per thread: a server steps in its own
            config = torch._dynamo.config
            config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
        if compiled is None:
            compiled = torch.compile(
                own_copy(step), backend=self.backend, dynamic=False, fullgraph=True, **self._mode_or_options()
            )
            self._steps[step] = compiled
        started = time.perf_counter()
        try:
            out = compiled(*args)
        except (VaswaniError, torch.OutOfMemoryError):
            raise
        except Exception as exc:  # whatever dynamo, AOTAutograd or a backend raised
            self.failure = compile_failure(exc)
            say_fallback(f"torch.compile does not work here ({self.failure})")
            return step(*args)
        if first:
            self.buckets.add(key)
            self.compile_seconds += time.perf_counter() - started
        return out

    def _follow_weights(self) -> None:
        """Copy the weights changed in place since they were blocked into their blocked copies
        again (an optimizer's step or ``load_state_dict`` between two decodings): about 8 µs for
        a hundred projections unchanged."""
        assert self._blocked is not None
        for i, (projection, version) in enumerate(self._blocked):
            if blocked_source(projection)._version != version:
                refresh_blocked(projection)
                self._blocked[i] = (projection, blocked_source(projection)._version)

    def _mode_or_options(self) -> dict[str, Any]:
        """``torch.compile``'s ``mode``, or where none is asked for and this torch has it (2.7 and
        later), the guard filter as its ``options`` (it takes one or the other, not both)."""
        if self.mode is not None:
            return {"mode": self.mode}
        skip = getattr(torch.compiler, "skip_guard_on_all_nn_modules_unsafe", None)
        return {} if skip is None else {"options": {"guard_filter_fn": skip}}

    def _check_model(self, model: torch.nn.Module) -> None:
        """Bind this object to ``model`` at its first run; raise :class:`ModelChanged` when a later
        run passes another model, or this one in another mode (``train()``) or dtype: its graphs
        run without guards on the model, so they would compute what they were traced from."""
        if self._model is None:
            parameter = next(model.parameters())
            self._model = (weakref.ref(model), weakref.ref(parameter), (model.training, parameter.dtype))
            return
        bound, parameter, first = self._model
        if bound() is not model:
            raise ModelChanged("compiled decoding serves the model of its first run: compile one for this")
        tensor = parameter()
        if tensor is None:  # the model's parameters were replaced
            tensor = next(model.parameters())
        state = (model.training, tensor.dtype)
        if state != first:
            raise ModelChanged(
                f"the model changed since its first compiled step (training, dtype: {first} → {state}): "
                "compile its decoding again"
            )

    def report(self) -> str | None:
        """One line on the compilation so far (its time, the buckets compiled), None before any."""
        if not self.buckets:
            return None
        graphs = len(self.buckets)
        return (
            f"vaswani: --compile: {graphs} decoding graph{'s' * (graphs > 1)} compiled in "
            f"{self.compile_seconds:.1f} s (first runs), apart from decoding"
        )


class ModelChanged(VaswaniError):
    """A :class:`CompiledDecoding` was given another model, or its model changed mode or dtype."""


def own_copy(step: Callable[..., Out]) -> Callable[..., Out]:
    """``step`` with a code object of its own (equal to its own, another object): the graphs
    dynamo compiles from it are kept apart from every other copy's."""
    return types.FunctionType(
        step.__code__.replace(), step.__globals__, step.__name__, step.__defaults__, step.__closure__
    )


def say_fallback(reason: str) -> None:
    """The one line that says decoding goes on without ``torch.compile``, and why."""
    print(f"vaswani: --compile: {reason}; decoding without it", file=sys.stderr)


def _newest(tokens: Tensor, rows: int, pad: int) -> Tensor:
    """The newest column of ``tokens`` (batch, t) as a contiguous (rows, 1) tensor, padded with
    ``pad`` (a view of ``tokens`` would have a stride of t, and a graph is specialised to strides)."""
    return _pad_rows(tokens[:, -1:].clone(memory_format=torch.contiguous_format), rows, pad)


def _pad_rows(x: Tensor, rows: int, value: int | bool) -> Tensor:
    """``x`` (n, …) with rows of ``value`` appended up to ``rows``."""
    if x.shape[0] == rows:
        return x
    return torch.cat([x, x.new_full((rows - x.shape[0], *x.shape[1:]), value)])


def lm_compiled_next_logits(
    model: GPT,
    prompt_mask: Tensor,
    budget: int,
    compiled: CompiledDecoding,
    vocab_size: int | None = None,
) -> NextLogits:
    """The next-token function of :func:`~vaswani.generation.lm.lm_next_logits` (left-padded
    prompts, logits of ids >= ``vocab_size`` never chosen) on a static cache, its steps compiled.

    ``prompt_mask`` (batch, prompt_len) is True on real tokens; the prompt and ``budget`` new
    tokens must fit the context (``max_len``: past it, decode with ``lm_next_logits``). The
    rows are padded to :func:`bucket` (rows of padding, masked), the cache to a bucket of
    prompt_len + budget columns; the buffer's mask is the prompt's, then True."""
    batch, prompt_len = prompt_mask.shape
    rows = bucket(batch)
    columns = min(bucket(prompt_len + budget, SMALLEST_BUFFER), model.config.max_len)
    mask = F.pad(_pad_rows(prompt_mask, rows, False), (0, columns - prompt_len), value=True)
    cache = model.new_cache(static=columns)
    key = ("lm", rows, columns)

    def next_logits(tokens: Tensor) -> Tensor:
        if tokens.shape[1] == prompt_len:  # the prefill, eagerly
            logits = _lm_step(model, _pad_rows(tokens, rows, 0), mask, cache)
        else:
            logits = compiled.run(_lm_step, key, model, _newest(tokens, rows, 0), mask, cache)
        logits = logits[:batch]
        if vocab_size is not None and vocab_size < logits.shape[-1]:
            logits = logits.clone()
            logits[:, vocab_size:] = -float("inf")
        return logits

    return next_logits


def _primed_source(
    model: Transformer, src: Tensor, budget: int, compiled: CompiledDecoding
) -> tuple[EncodedSource, int]:
    """``src`` (batch, src_len) padded to :func:`bucket` rows and a bucket of columns (at least 8,
    at most ``max_len``; the pad id: masked keys), encoded through the ``seq2seq-encode`` graph,
    and its decoding state with static self-attention caches of a bucket of 1 + ``budget``
    columns within the context, primed for a first step like every later one
    (:meth:`BlockStack.prime_cache <vaswani.layers.blocks.BlockStack.prime_cache>`); and those
    columns."""
    batch, src_len = src.shape
    rows, pad = bucket(batch), model.config.pad_id
    src_columns = min(bucket(src_len, 8), model.config.max_len)
    padded = F.pad(_pad_rows(src, rows, pad), (0, src_columns - src_len), value=pad)
    columns = min(bucket(1 + budget, SMALLEST_BUFFER), model.config.max_len)
    memory, keys_values = compiled.run(_seq2seq_encode, ("seq2seq-encode", rows, src_columns), model, padded)
    source = model.start_decoding(padded, static=columns, memory=memory)
    assert source.cache is not None
    model.decoder.prime_cache(source.cache, memory, keys_values)
    return source, columns


def seq2seq_compiled_next_logits(
    model: Transformer, src: Tensor, budget: int, compiled: CompiledDecoding
) -> NextLogits:
    """The next-token function of :func:`~vaswani.generation.seq2seq.seq2seq_next_logits` with the
    decoder's self-attention on a static cache, every step compiled.

    ``src`` (batch, src_len) is padded to :func:`bucket` rows and a bucket of columns (at least 8,
    at most ``max_len``; the pad id: masked keys), the cache to a bucket of 1 + ``budget`` (the
    most tokens of a row) columns, within the context. The cross-attention caches are filled and
    the static buffers allocated before the first step (:meth:`BlockStack.prime_cache
    <vaswani.layers.blocks.BlockStack.prime_cache>`), so that the first step (BOS) runs through
    the same graph as the others: eager, it took a quarter of a short sentence's time at batch 1."""
    batch, pad = src.shape[0], model.config.pad_id
    source, columns = _primed_source(model, src, budget, compiled)
    rows, src_columns = source.memory.shape[:2]
    key = ("seq2seq", rows, src_columns, columns)

    def next_logits(tokens: Tensor) -> Tensor:
        return compiled.run(_seq2seq_step, key, model, _newest(tokens, rows, pad), source)[:batch]

    return next_logits


def seq2seq_compiled_beams(
    model: Transformer, src: Tensor, budget: int, compiled: CompiledDecoding
) -> Reorderable:
    """Beam search's next-token function and reordering of an encoder-decoder
    (:func:`~vaswani.generation.seq2seq.seq2seq_decoding`'s) with the decoder's self-attention on
    static caches, the encoder and every step compiled.

    The source is padded, encoded and the caches primed as :func:`seq2seq_compiled_next_logits`
    does it (rows and columns to buckets, the encoder's graph shared with greedy decoding's), the
    caches a bucket of 1 + ``budget`` columns; the first step (one hypothesis a source row) is a
    graph of its own, the later ones (``beam`` a row) another. Each source row serves ``hyps``
    consecutive decoder rows (1 at the first step, the beam after it). When the search drops the
    rows it has finished, the rows kept are padded up to the bucket of their number, the decoder
    rows with them (padding rows copy row 0: computed, never read), so that a graph serves every
    step of a bucket: a search of 32 sentences compiles at most six (32, 16, …, 1 rows)."""
    batch, pad = src.shape[0], model.config.pad_id
    source, columns = _primed_source(model, src, budget, compiled)
    src_columns = source.memory.shape[1]
    shape = {"real": batch, "hyps": 1}  # source rows still searching; decoder rows per source row

    def next_logits(tokens: Tensor) -> Tensor:
        rows = source.memory.shape[0] * shape["hyps"]
        step_input = _newest(tokens, rows, pad)
        key = ("seq2seq-beam", rows, source.memory.shape[0], src_columns, columns)
        return compiled.run(_seq2seq_step, key, model, step_input, source)[: tokens.shape[0]]

    def reorder(index: Tensor, sources: Tensor | None) -> None:
        kept = shape["real"] if sources is None else sources.numel()
        if kept == 0:  # the search has ended
            shape["real"] = 0
            return
        hyps, rows = index.numel() // kept, bucket(kept)
        keep_sources = sources is not None or rows != source.memory.shape[0]
        if sources is None:
            sources = torch.arange(kept, device=index.device)
        source.reorder(
            _pad_rows(index, rows * hyps, 0), _pad_rows(sources, rows, 0) if keep_sources else None
        )
        shape.update(real=kept, hyps=hyps)

    return Reorderable(next_logits, reorder)


def lm_batch_logits(
    compiled: CompiledDecoding, model: GPT, tokens: Tensor, mask: Tensor, cache: list[Any]
) -> Tensor:
    """A continuous batch's step (:class:`~vaswani.generation.continuous.ContinuousEngine` with
    ``compiled``): the logits (rows, vocab) after each row's newest token ``tokens`` (rows, 1), on
    static caches of ``mask.shape`` (padded rows, columns:
    :func:`~vaswani.generation.batch_cache.static_mask`). The graph is the one
    :func:`lm_compiled_next_logits` runs for those shapes."""
    padded, columns = mask.shape
    step_input = _pad_rows(tokens, padded, 0)
    return compiled.run(_lm_step, ("lm", padded, columns), model, step_input, mask, cache)[: tokens.shape[0]]


def seq2seq_batch_logits(
    compiled: CompiledDecoding, model: Transformer, tokens: Tensor, source: EncodedSource, mask: Tensor
) -> Tensor:
    """A continuous batch's step of an encoder-decoder (:class:`~vaswani.generation.
    continuous_seq2seq.Seq2SeqEngine` with ``compiled``): the logits (rows, vocab) after ``tokens``
    (rows, 1), the decoder's self-attention on static caches of ``mask.shape`` (padded rows,
    columns: :func:`~vaswani.generation.batch_cache.static_mask`), ``source`` padded to those rows
    and a bucket of columns."""
    padded, columns = mask.shape
    step_input = _pad_rows(tokens, padded, model.config.pad_id)
    key = ("seq2seq-batch", padded, source.memory.shape[1], columns)
    return compiled.run(_seq2seq_step, key, model, step_input, source, mask)[: tokens.shape[0]]
