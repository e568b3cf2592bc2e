"""``vaswani serve``: every trained run behind one HTTP API (FastAPI and uvicorn).

The interface the other parts build on:

- :func:`vaswani.serve.app.create_app` ``(run_dirs, settings) -> FastAPI``: loads every run at
  once and holds, in ``app.state``, ``models`` (id → ``ServedModel``: ``name``, ``task``,
  ``wrapper``, ``run_dir``), ``queues`` (id → ``BatchQueue``: ``submit(key, payload)``,
  ``hold()``, ``call(fn, *args)``, ``thread``), ``settings`` (``ServeSettings``) and ``metrics``
  (``ServeMetrics``).
- :mod:`vaswani.serve.completions`: ``/v1/completions`` and ``/v1/translations``; completions run
  on :mod:`vaswani.serve.engine` (``app.state.engines``: a continuous-batching engine per lm run)
  instead of ``queue.submit`` and ``streamed``'s worker;
  :mod:`vaswani.serve.generate`: ``complete``/``translate_one`` with a per-step ``watch``.
- :mod:`vaswani.serve.streaming`: ``TextStream`` (incremental detokenization, never cut inside
  a character), ``Pipe`` (worker thread → event loop, cancelled when the client goes), ``sse``.
- :mod:`vaswani.serve.errors`: ``ApiError`` and the one-line JSON error body.
"""
