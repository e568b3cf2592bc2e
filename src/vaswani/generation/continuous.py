"""Continuous batching of a decoder-only model: requests join and leave a running batch at step
boundaries, so that a long generation does not hold back short ones.

The running rows share one KV cache per layer (the model's ``new_cache``: a growing
:class:`~vaswani.layers.cache.KVCache`, or a :class:`~vaswani.layers.cache.RollingKVCache` in
windowed layers), left-padded: each row's tokens are the newest columns, a key mask (rows,
columns) marks them and gives each row its position ids, as in a left-padded batch of
:func:`~vaswani.generation.lm.lm_next_logits`. A step feeds every row its newest token. A new
request is prefilled alone (its prompt in one forward pass, its own cache, its first token), then
its cache joins the batch's; a finished or cancelled row leaves. Joining and leaving regroup the
caches in one copy: the rows right-aligned on ``max(tokens in view)`` columns, so that columns that
no row needs any more are dropped and the cache never holds more than ``max_batch`` rows of
``max_len`` columns. A row whose context is full restarts its view ``max_len // 2`` tokens before
its end and is prefilled again, as :func:`~vaswani.generation.lm.lm_next_logits` does.

Each request keeps its :class:`DecodingConfig` (greedy or sampled; temperature, top_k, top_p) and
its own generator (seeded by ``decoding.seed``): a row draws from its own logits with its own
generator, so a seeded request gives the same tokens alone and in any batch.

:class:`BatchEngine` is what every engine shares (the queue, the thread, the order of a step, the
choice of each row's token); :class:`ContinuousEngine` is the decoder-only model's, and
:mod:`~vaswani.generation.continuous_seq2seq` the encoder-decoder's.
"""

from __future__ import annotations

import math
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor

from vaswani.errors import DataError, InputError, VaswaniError
from vaswani.generation.batch_cache import advance, fill, kept_rows, parts, static_mask, suffix_mask
from vaswani.generation.compiled import (
    SMALLEST_BUFFER,
    CompiledDecoding,
    bucket,
    lm_batch_logits,
)
from vaswani.generation.config import GREEDY, DecodingConfig
from vaswani.generation.lm import lm_budget
from vaswani.generation.logprobs import logprobs_of
from vaswani.generation.request import Decode, Request
from vaswani.generation.sampling import choose_next
from vaswani.layers.blocks import LayerCache
from vaswani.models.gpt import GPT

State = TypeVar("State")
Engine = TypeVar("Engine", bound="BatchEngine[Any]")


class QueueFull(VaswaniError):
    """The engine already holds ``max_pending`` requests waiting for a slot."""


class EngineClosed(VaswaniError):
    """The engine was closed: it takes no more requests, and those it held ended."""


class BatchEngine(Generic[State]):
    """What every continuous-batching engine shares: the queue of waiting requests, the thread that
    steps while there is work, the order of a step (cancelled rows leave, the batch steps, waiting
    requests join, finished rows leave), each row's choice of its next token, and closing.

    A model's engine says how a joining row is prefilled alone (:meth:`_prefill`: its ``State``,
    what it joins the batch with, and its first token; :meth:`_prefill_rows` may prefill the rows
    that join at a step together), how the running batch steps
    (:meth:`_decode_batch`), how the batch is rebuilt on joining and leaving (:meth:`_rebuild`)
    and which rows restart their view (:meth:`_restart`). ``rows`` are the running requests in the
    order of the rows of ``cache`` (one :class:`LayerCache` per layer), whose self-attention
    caches hold ``width`` columns: each row's tokens are its newest ``row.cached``.
    """

    def __init__(
        self, device: torch.device, eos_id: int, decode: Decode, max_batch: int, max_pending: int | None,
        on_step: Callable[[int], None] | None, compiled: CompiledDecoding | None,
    ) -> None:  # fmt: skip
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.device, self.eos_id, self.decode = device, eos_id, decode
        self.max_batch, self.max_pending, self.on_step = max_batch, max_pending, on_step
        self.compiled = compiled
        self.rows: list[Request] = []
        self.cache: list[LayerCache] | None = None
        self.width = 0
        self.columns = 0  # of the static caches (compiled steps)
        self.static_mask: Tensor | None = None  # their key mask (static_mask)
        self.steps, self.tokens_generated = 0, 0  # counts, for a server's metrics
        self._pending: deque[Request] = deque()
        self._calls: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._lock = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> int:  # requests waiting for a slot
        return len(self._pending)

    @property
    def cache_bytes(self) -> int:
        """Bytes held by the running batch's caches."""
        return sum(c.self_attn.nbytes + c.cross_attn.nbytes for c in self.cache or [])

    def _enqueue(self, request: Request) -> Request:
        """Queue ``request`` for a slot (EngineClosed once closed, QueueFull past ``max_pending``)."""
        with self._lock:
            if self._closed:
                raise EngineClosed("the engine is closed")
            if self.max_pending is not None and len(self._pending) >= self.max_pending:
                raise QueueFull(f"{len(self._pending)} requests are already waiting (max_pending)")
            self._pending.append(request)
            self._lock.notify_all()
        return request

    def step(self) -> int:
        """Advance every running request by one token: cancelled rows leave, rows whose view
        restarts leave to be prefilled again, waiting requests take the free slots (prefilled
        alone), the rest of the batch steps together, finished rows leave. Returns the rows that
        got a token."""
        with torch.no_grad():
            return self._step()

    def _step(self) -> int:
        leaving = {id(r) for r in self.rows if r.cancelled}
        for row in (r for r in self.rows if id(r) in leaving):
            row._finish("cancelled")
        full = self._restart([r for r in self.rows if id(r) not in leaving])
        if leaving or full:
            self._regroup([r for r in self.rows if id(r) not in leaving and r not in full], [])
        stepped = list(self.rows)
        if stepped:
            self._grow()
        graphs = len(self.compiled.buckets) if self.compiled else 0
        tokens = self._decode_batch() if stepped else []
        if self.compiled and len(self.compiled.buckets) != graphs:  # a new bucket's graph: its time said
            print(self.compiled.report(), file=sys.stderr)
        joining = full + self._admit(self.max_batch - len(stepped) - len(full))
        prefilled: list[tuple[Request, State]] = []
        for row, state, token in self._prefill_rows(joining):
            prefilled.append((row, state))
            tokens.append(token)
        done = {id(r) for r, t in zip(stepped + [r for r, _ in prefilled], tokens, strict=True) if r._push(t)}
        self.steps += 1
        self.tokens_generated += len(tokens)
        if self.on_step is not None and tokens:
            self.on_step(len(tokens))
        self._regroup(
            [r for r in stepped if id(r) not in done], [(r, c) for r, c in prefilled if id(r) not in done]
        )
        return len(tokens)

    def _restart(self, rows: list[Request]) -> list[Request]:
        """The running ``rows`` that leave the batch to be prefilled again: none by default."""
        return []

    def _prefill_rows(self, rows: list[Request]) -> list[tuple[Request, State, int]]:
        """The joining ``rows`` that prefill, each with what it joins the batch with and its next
        token: here each alone (:meth:`_prefill`), a request whose prefill fails ending alone with
        its error."""
        prefilled = []
        for row in rows:
            try:
                state, token = self._prefill(row)
            except Exception as error:  # one request's failure ends it alone
                row._finish("error", error)
                continue
            prefilled.append((row, state, token))
        return prefilled

    def _prefill(self, row: Request) -> tuple[State, int]:
        """``row`` alone in one forward pass: what it joins the batch with, and its next token."""
        raise NotImplementedError

    def _decode_batch(self) -> list[int]:
        """One step of the running batch: each row's next token."""
        raise NotImplementedError

    def _regroup(self, keep: list[Request], joining: list[tuple[Request, State]]) -> None:
        """The batch of the rows ``keep`` (running, in their order) and ``joining``: cleared when
        none is left, unchanged when nothing joins or leaves, else :meth:`_rebuild`."""
        rows = keep + [r for r, _ in joining]
        if not rows:
            self._clear()
            return
        if keep == self.rows and not joining:
            return
        self._rebuild(keep, joining, rows)

    def _rebuild(
        self, keep: list[Request], joining: list[tuple[Request, State]], rows: list[Request]
    ) -> None:
        """The batch state of ``rows`` (= ``keep`` then the ``joining`` requests)."""
        raise NotImplementedError

    def _clear(self) -> None:
        """No running rows: the batch's state dropped."""
        self.rows, self.cache, self.width = [], None, 0
        self.columns, self.static_mask = 0, None

    def _static_shape(self, rows: int, width: int, context: int) -> tuple[int, int] | None:
        """The padded rows and the columns of a compiled batch of ``rows`` rows holding at most
        ``width`` tokens: powers of two, the columns leaving room for the steps to come, within the
        model's ``context`` (which a step never outgrows: a row restarts its view or ends first).
        None when the batch decodes eagerly."""
        if self.compiled is None:
            return None
        return bucket(rows), min(bucket(width + 1, SMALLEST_BUFFER), context)

    def _grow(self) -> None:
        """A compiled batch whose static caches are full regrouped into twice the columns."""
        if self.compiled is not None and self.width + 1 > self.columns:
            self._rebuild(self.rows, [], self.rows)

    def _placed(self, rows: list[Request], width: int, shape: tuple[int, int] | None) -> None:
        """The batch state of ``rows`` (on caches of ``shape``: padded rows, columns, when compiled)."""
        self.rows, self.width = rows, width
        if shape is not None:
            self.columns = shape[1]
            self.static_mask = static_mask([r.cached for r in rows], width, shape[1], shape[0], self.device)

    def _admit(self, free: int) -> list[Request]:
        """Up to ``free`` waiting requests, oldest first (cancelled ones end here)."""
        taken: list[Request] = []
        with self._lock:
            while self._pending and len(taken) < free:
                request = self._pending.popleft()
                if request.cancelled:
                    request._finish("cancelled")
                else:
                    taken.append(request)
        return taken

    def _choose(self, logits: Tensor, rows: list[Request]) -> list[int]:
        """Each row's next token: argmax, or a draw with its own decoding and generator; the
        log-probabilities of the rows that asked for them are recorded."""
        choice = logits.argmax(dim=-1)
        for i, row in enumerate(rows):
            if row.decoding.strategy == "sample":
                choice[i] = choose_next(logits[i : i + 1], row.decoding, row.generator)[0]
        for i, row in enumerate(rows):
            if row.top_logprobs is not None:
                row.logprobs.extend(logprobs_of(logits[i : i + 1], choice[i : i + 1], row.top_logprobs))
        return choice.tolist()

    def _self_attention_mask(self) -> Tensor | None:
        """The self-attention key mask (rows, width + 1) of a step that feeds each row its newest
        token (True on the rows' tokens); None when no row is padded (positions follow the cache)."""
        if all(r.cached == self.width for r in self.rows):
            return None
        return suffix_mask([r.cached + 1 for r in self.rows], self.width + 1, self.device)

    def _kept(self, keep: list[Request]) -> Tensor:
        """The rows of the running batch's caches that ``keep`` are, in their order."""
        place = {id(r): i for i, r in enumerate(self.rows)}
        return torch.tensor([place[id(r)] for r in keep], dtype=torch.long, device=self.device)

    def start(self: Engine) -> Engine:
        """Run :meth:`step` in a thread of its own while there is work."""
        self._thread = threading.Thread(target=self._drive, name="vaswani-continuous", daemon=True)
        self._thread.start()
        return self

    def call(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """``fn(*args)`` in the thread of the started engine (:meth:`start`), between two steps
        (its result or its exception in the future; EngineClosed once closed). A model's other
        work (a server's beam searches, scores) then runs in the same thread as its steps: each
        thread that runs parallel operators keeps a pool of OpenMP workers, and pools that
        outnumber the cores slow every parallel region down
        (:func:`vaswani.runtime.in_passing_thread`)."""
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise EngineClosed("the engine is closed")
            self._calls.append((future, lambda: fn(*args)))
            self._lock.notify_all()
        return future

    def _drive(self) -> None:
        while True:
            with self._lock:
                while not self._closed and not self._pending and not self.rows and not self._calls:
                    self._lock.wait()
                if self._closed:
                    break
                calls, self._calls = list(self._calls), deque()
                stepping = bool(self._pending or self.rows)
            for future, run in calls:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(run())
                    except BaseException as error:  # the caller's to raise
                        future.set_exception(error)
            if not stepping:
                continue
            try:
                self.step()
            except Exception as error:  # the batch failed: its requests end with the error
                for row in self.rows:
                    row._finish("error", error)
                self._clear()
        self._end_all()

    def close(self) -> None:
        """Take no more requests; end those held (cancelled) and stop the thread."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join()
        else:
            self._end_all()

    def _end_all(self) -> None:
        with self._lock:
            held, self._pending = list(self._pending) + self.rows, deque()
            calls, self._calls = list(self._calls), deque()
        for future, _ in calls:
            future.cancel()
        for request in held:
            request._finish("cancelled")
        self._clear()


class ContinuousEngine(BatchEngine[list[LayerCache]]):
    """Continuous batching of ``model`` (a :class:`GPT`) for up to ``max_batch`` rows at once;
    ``max_pending`` requests may wait for a slot (None: any number); ``on_step(rows)`` is told the
    rows of each step (a server's batch sizes).

    ``engine.submit(prompt_ids, decoding) -> Request``; :meth:`step` advances every running
    request by one token (called by :meth:`start`'s thread, or directly). ``decode`` turns ids into
    text (stop strings, streaming); logits of ids >= ``vocab_size`` (padding of the embedding) are
    never chosen. Every tensor stays on the model's device; a step reads it once (the new ids).
    """

    def __init__(
        self, model: GPT, eos_id: int, decode: Decode, vocab_size: int | None = None,
        max_batch: int = 8, max_pending: int | None = None, on_step: Callable[[int], None] | None = None,
        compiled: CompiledDecoding | None = None,
    ) -> None:  # fmt: skip
        device = next(model.parameters()).device
        super().__init__(device, eos_id, decode, max_batch, max_pending, on_step, compiled)
        self.model = model.eval()
        self.vocab_size = vocab_size
        self.max_len = model.config.max_len

    def submit(
        self, prompt_ids: Sequence[int], decoding: DecodingConfig = GREEDY,
        on_event: Callable[[Request], None] | None = None, logprobs: int | None = None,
    ) -> Request:  # fmt: skip
        """Queue the generation of a continuation of ``prompt_ids`` (an empty prompt starts from
        EOS, as a new document) as ``decoding`` says; ``on_event(request)`` is called from the
        engine's thread after each new token and at the end; ``logprobs`` (alternatives per
        token, 0 for none) records each token's log-probability. A prompt that leaves no room in the context
        is a DataError, an id outside the vocabulary an InputError, a full queue QueueFull."""
        budget = lm_budget(decoding)
        prompt = [int(i) for i in prompt_ids] or [self.eos_id]
        if len(prompt) >= self.max_len:
            context = f"the model's context of {self.max_len} (model.max_len)"
            raise DataError(f"prompt: {len(prompt)} tokens do not fit {context} with room to generate")
        vocab = self.vocab_size or self.model.config.vocab_size
        if not all(0 <= i < vocab for i in prompt):
            raise InputError(f"prompt: token ids must be in [0, {vocab})")
        generator = decoding.generator(self.device)
        request = Request(
            prompt, decoding, budget, self.eos_id, self.decode, generator, on_event, logprobs=logprobs
        )
        return self._enqueue(request)

    def _restart(self, rows: list[Request]) -> list[Request]:
        """Rows whose context is full: their view restarts ``max_len // 2`` tokens before their end."""
        full = [r for r in rows if len(r.tokens) - r.start > self.max_len]
        for row in full:
            row.start = len(row.tokens) - self.max_len // 2
        return full

    def _logits(self, tokens: Tensor, mask: Tensor | None, cache: list[LayerCache]) -> Tensor:
        return self._in_vocab(self.model(tokens, attention_mask=mask, cache=cache, last_only=True)[:, -1])

    def _in_vocab(self, logits: Tensor) -> Tensor:
        """``logits`` in float32, those of ids >= ``vocab_size`` -inf."""
        logits = logits.float()
        if self.vocab_size is not None and self.vocab_size < logits.shape[-1]:
            logits[:, self.vocab_size :] = -math.inf
        return logits

    def _prefill(self, row: Request) -> tuple[list[LayerCache], int]:
        """The row's tokens in view in one forward pass, alone: its cache and next token."""
        view = row.tokens[row.start :]
        cache = self.model.new_cache()
        ids = torch.tensor([view], dtype=torch.long, device=self.device)
        token = self._choose(self._logits(ids, None, cache), [row])[0]
        row.cached = len(view)
        return cache, token

    def _decode_batch(self) -> list[int]:
        """One step of the running batch: each row's newest token, fed with the key mask of the
        rows' tokens (left out when no row is padded: positions then follow the cache), or through
        the compiled step on the static caches."""
        assert self.cache is not None
        newest = torch.tensor([[r.tokens[-1]] for r in self.rows], dtype=torch.long, device=self.device)
        if self.compiled is None:
            logits = self._logits(newest, self._self_attention_mask(), self.cache)
        else:
            assert self.static_mask is not None
            step = lm_batch_logits(self.compiled, self.model, newest, self.static_mask, self.cache)
            logits = self._in_vocab(step)
        tokens = self._choose(logits, self.rows)
        self.width += 1
        for row in self.rows:
            row.cached += 1
        return tokens

    def _rebuild(
        self, keep: list[Request], joining: list[tuple[Request, list[LayerCache]]], rows: list[Request]
    ) -> None:
        """The batch of the rows ``keep`` (running, in their order) and ``joining`` (each with its
        own cache): one cache per layer, the rows right-aligned on the most tokens any holds (static
        caches of padded rows and a bucket of columns when the steps are compiled)."""
        width = max(r.cached for r in rows)
        index = self._kept(keep)
        shape = self._static_shape(len(rows), width, self.max_len)
        padded, columns = (None, None) if shape is None else shape
        cache = self.model.new_cache(columns)
        for layer, target in enumerate(cache):
            running = self.cache[layer].self_attn if self.cache else None
            own = parts([c[layer].self_attn for _, c in joining])
            fill(target.self_attn, kept_rows(running, index) + own, width, padded)
        advance(cache, width)
        self.cache = cache
        self._placed(rows, width, shape)
