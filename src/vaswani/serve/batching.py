"""The batching queue of one model: one-shot requests collected into one call of its wrapper.

``BatchQueue(run, max_batch, max_wait_s, capacity)``: ``await queue.submit(job)`` puts a job in the
queue and returns its result. A worker task (started on the first submit, in the running event
loop) takes the oldest job and the jobs with the same ``job.key`` that arrive within
``max_wait_s``, up to ``max_batch`` of them, and calls ``run(jobs) -> results`` (one result per
job, in order) in the model's worker thread, so the event loop never blocks. If a batch of
several jobs fails, each is run again alone, so that one bad request never fails the others; a
job's exception is raised by its ``submit`` (its traceback's frames cleared, so that the memory
they held is given back at once); a batch whose clients have all gone (their
``submit`` cancelled) may stop by raising :class:`Cancelled`. ``capacity`` counts the jobs
waiting or running (and the streams holding the model, :meth:`BatchQueue.hold`): past it,
``submit`` raises :class:`QueueFull` (the server's 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Callable, Hashable, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


class Cancelled(Exception):
    """Every client of a generation has gone: it stops at the next step."""


class QueueFull(Exception):
    """The queue of a model holds ``capacity`` requests already."""


@dataclass
class Job:
    """One request's work: ``key`` says which jobs may share a call (the same decoding options),
    ``payload`` is what ``run`` reads."""

    key: Hashable
    payload: Any
    future: asyncio.Future[Any] | None = field(default=None, repr=False)


class BatchQueue:
    """See the module docstring. ``on_batch(size)`` is told the size of each batch (metrics);
    ``executor`` is the model's worker thread (default: one of the queue's own)."""

    def __init__(
        self,
        run: Callable[[Sequence[Job]], Sequence[Any]],
        max_batch: int,
        max_wait_s: float,
        capacity: int,
        on_batch: Callable[[int], None] = lambda size: None,
        on_cancel: Callable[[], None] = lambda: None,
        executor: Executor | None = None,
    ) -> None:
        self.run, self.max_batch, self.max_wait_s, self.capacity = run, max_batch, max_wait_s, capacity
        self.on_batch, self.on_cancel = on_batch, on_cancel
        self.pending: list[Job] = []
        self.busy = 0  # jobs being run and streams holding the model
        self.arrived = asyncio.Event()
        self.worker: asyncio.Task[None] | None = None
        self.thread = executor or ThreadPoolExecutor(max_workers=1, thread_name_prefix="vaswani-model")

    def __len__(self) -> int:
        """Requests waiting or running."""
        return len(self.pending) + self.busy

    def check_room(self) -> None:
        if len(self) >= self.capacity:
            raise QueueFull(f"the queue holds {len(self)} requests (--queue-size {self.capacity})")

    async def submit(self, key: Hashable, payload: Any) -> Any:
        """Queue one job and wait for its result (its exception is raised here)."""
        self.check_room()
        job = Job(key, payload, asyncio.get_running_loop().create_future())
        self.pending.append(job)
        self.arrived.set()
        if self.worker is None or self.worker.done():
            self.worker = asyncio.get_running_loop().create_task(self._work())
        assert job.future is not None
        return await job.future

    @contextlib.contextmanager
    def hold(self, check: bool = True) -> Iterator[None]:
        """Count a stream that runs on its own as one request of this queue while it runs (with
        ``check``, a full queue raises :class:`QueueFull` first)."""
        if check:
            self.check_room()
        self.busy += 1
        try:
            yield
        finally:
            self.busy -= 1

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the model's worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self.thread, fn, *args)

    async def _work(self) -> None:
        while self.pending:
            first = self.pending[0]
            deadline = asyncio.get_running_loop().time() + self.max_wait_s
            while self._matching(first.key) < self.max_batch:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                self.arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.arrived.wait(), left)
            batch = [job for job in self.pending if job.key == first.key][: self.max_batch]
            self.pending = [job for job in self.pending if job not in batch]
            self.busy += len(batch)
            try:
                await self._run(batch)
            finally:
                self.busy -= len(batch)

    def _matching(self, key: Hashable) -> int:
        return sum(job.key == key for job in self.pending)

    async def _run(self, batch: list[Job]) -> None:
        live = [job for job in batch if job.future is not None and not job.future.done()]
        if not live:
            return
        self.on_batch(len(live))
        try:
            results = await self.call(self.run, live)
        except Cancelled:  # every client of the batch has gone (their futures are cancelled)
            self.on_cancel()
            return
        except Exception as exc:
            traceback.clear_frames(exc.__traceback__)  # the tensors of its frames freed now
            if len(live) == 1:
                _settle(live[0], exc=exc)
                return
            for job in live:  # one failure must not fail the others: each alone
                await self._run([job])
            return
        for job, result in zip(live, results, strict=True):
            _settle(job, result=result)


def _settle(job: Job, result: Any = None, exc: BaseException | None = None) -> None:
    """Hand ``job`` its result or exception, unless its client has gone (the future cancelled)."""
    if job.future is None or job.future.done():
        return
    if exc is not None:
        job.future.set_exception(exc)
    else:
        job.future.set_result(result)
