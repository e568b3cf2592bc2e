"""``vaswani serve``: every trained run behind one HTTP API (FastAPI and uvicorn).

The interface the other parts build on:

- :func:`vaswani.serve.app.create_app` ``(run_dirs, settings) -> FastAPI``: loads every run at
  once and holds, in ``app.state``, ``models`` (id → ``ServedModel``: ``name``, ``task``,
  ``wrapper``, ``run_dir``), ``queues`` (id → ``BatchQueue``: ``submit(key, payload)``,
  ``hold()``, ``call(fn, *args)``, ``thread``), ``settings`` (``ServeSettings``) and ``metrics``
  (``ServeMetrics``).
- :mod:`vaswani.serve.completions`: ``/v1/completions`` and ``/v1/translations``; completions and
  greedy or sampled translations run on :mod:`vaswani.serve.engine` (``app.state.engines``: a
  continuous-batching engine per lm and translation run), beam search on ``queue.submit``.
- :mod:`vaswani.serve.streaming`: ``TextStream`` (incremental detokenization, never cut inside
  a character), ``sse``.
- :mod:`vaswani.serve.errors`: ``ApiError`` and the one-line JSON error body.
"""
