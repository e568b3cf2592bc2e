"""The app factory: ``create_app(run_dirs, settings) -> FastAPI``.

Every run directory is loaded at once (:func:`~vaswani.serve.loading.load_models`; one that does not
load raises its one-line error before anything listens). The app's state holds what the routes use:
``app.state.models`` (id → :class:`~vaswani.serve.loading.ServedModel`), ``app.state.queues`` (id →
:class:`~vaswani.serve.batching.BatchQueue`), ``app.state.settings``
(:class:`~vaswani.serve.settings.ServeSettings`) and ``app.state.metrics``
(:class:`~vaswani.serve.metrics.ServeMetrics`). Routes: ``/health``, ``/metrics``, ``/v1/models``,
and the routers of :mod:`vaswani.serve.completions`, :mod:`vaswani.serve.chat` and
:mod:`vaswani.serve.tasks`; a page at ``/``
is added by the router that serves it. The API's schema is ``/openapi.json``; FastAPI's ``/docs``
and ``/redoc`` pages are off, since they fetch their scripts from a public CDN (the server is meant
to work offline; any OpenAPI viewer reads the schema).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import Response

from vaswani.runtime import in_passing_thread
from vaswani.serve import chat, completions, page, tasks
from vaswani.serve.batching import BatchQueue
from vaswani.serve.engine import Engine, EngineThread, engines_of
from vaswani.serve.errors import install_handlers
from vaswani.serve.loading import ServedModel, load_models
from vaswani.serve.metrics import ServeMetrics
from vaswani.serve.schemas import Health, ModelCard, ModelList
from vaswani.serve.security import Guard, require_key
from vaswani.serve.settings import ServeSettings
from vaswani.serve.work import runner


def create_app(run_dirs: Sequence[str | Path], settings: ServeSettings | None = None) -> FastAPI:
    """The server of the runs ``run_dirs`` (see the module docstring)."""
    settings = settings or ServeSettings()
    # Loaded in a thread that ends: the main thread keeps no OpenMP workers beside the engines'.
    models = in_passing_thread(
        load_models, run_dirs, settings.device, settings.quantize, settings.dtype, settings.compile
    )
    metrics = ServeMetrics()
    app = FastAPI(
        title="vaswani",
        summary="every trained vaswani run behind one HTTP API",
        version="1",
        docs_url=None,  # Swagger's and ReDoc's pages load their scripts from a CDN: not offline
        redoc_url=None,
    )
    app.state.settings, app.state.models, app.state.metrics = settings, models, metrics
    app.state.engines = engines_of(models, settings, metrics)
    app.state.queues = {
        name: queue_of(served, settings, metrics, app.state.engines.get(name))
        for name, served in models.items()
    }
    install_handlers(app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(Guard, max_body_bytes=settings.max_body_bytes, metrics=metrics, debug=settings.debug)

    @app.get("/health", response_model=Health, tags=["server"])
    async def health(request: Request) -> Health:
        """Whether the server is up, and the models it serves."""
        return Health(models=list(request.app.state.models))

    @app.get("/metrics", tags=["server"])
    async def prometheus(request: Request) -> Response:
        """The server's metrics in Prometheus' text format."""
        for name, queue in request.app.state.queues.items():
            metrics.queue.labels(name).set(len(queue))
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.get("/v1/models", response_model=ModelList, tags=["server"], dependencies=[Depends(require_key)])
    async def list_models(request: Request) -> ModelList:
        """The served models, each with its task and endpoints."""
        served: dict[str, ServedModel] = request.app.state.models
        return ModelList(
            data=[ModelCard(id=m.name, task=m.task, endpoints=list(m.endpoints)) for m in served.values()]
        )

    app.include_router(completions.router)
    app.include_router(chat.router)
    app.include_router(tasks.router)
    app.include_router(page.router)
    return app


def queue_of(
    served: ServedModel, settings: ServeSettings, metrics: ServeMetrics, engine: Engine | None = None
) -> BatchQueue:
    """The batching queue of one served model, its batch sizes counted in ``metrics``; its calls
    run in the thread of the model's ``engine`` where it has one."""
    return BatchQueue(
        runner(served),
        settings.max_batch,
        settings.max_wait_ms / 1000,
        settings.queue_size,
        on_batch=metrics.batch.labels(served.name).observe,
        on_cancel=metrics.cancelled.labels(served.name).inc,
        executor=EngineThread(engine) if engine is not None else None,
    )
