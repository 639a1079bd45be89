"""The page's HTTP interface: a Starlette app over one `TrainingClient`, holding no state.

Every answer is read from the client when asked (a watch reads again every POLL_SECONDS), or,
for a tuning study, from the Ray Tune directory `trainop tune` wrote (trainop_hpo.study).
Routes (all behind `security.Guard`):
  GET  /                                    the page (static/index.html)
  GET  /static/...                          its script, style and the vendored uPlot
  GET  /api/jobs[/watch]                    the job list (as JSON, or as server-sent events)
  GET  /api/jobs/{ns}/{name}[/watch]        one job: replicas, conditions, events
  GET  /api/jobs/{ns}/{name}/yaml           the job as `trainop get NAME -o yaml` prints it
  GET  /api/jobs/{ns}/{name}/logs           its log, followed (?replica=, ?tail=)
  GET  /api/jobs/{ns}/{name}/metrics        its metric lines as points, followed
  POST /api/jobs/{ns}/{name}/delete         `trainop delete NAME`
  GET  /api/studies[/{name}]                tuning studies under the storage path
With a namespace (`trainop ui -n NS`) a job of another namespace is 404 on every job route. A
numeric query parameter is whole digits within its bounds, else 400 naming it.
"""

from __future__ import annotations

import html
import importlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from trainop_core.client import TrainingClient
from trainop_core.errors import InvalidNameError, NotFoundError, TrainopError
from trainop_core.ui import streams, views
from trainop_core.ui.security import Access, Guard

POLL_SECONDS = 1.0
DEFAULT_TAIL = 500  # log lines a replica's view starts with
MAX_TAIL = 5000
DIGITS = re.compile(r"[0-9]{1,9}")
STUDIES_MISSING = "reading a tuning study needs Ray Tune: pip install 'trainop[ray]'"
STATIC = resources.files("trainop_core.ui") / "static"


@dataclass(frozen=True)
class Settings:
    client: TrainingClient
    namespace: str | None  # None: every namespace
    studies: Path  # where `trainop tune` stores its studies (Ray Tune's storage path)


def build_app(settings: Settings, access: Access) -> Guard:
    api, e = _Api(settings), _answers_errors
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    page = page.replace("{{csrf}}", html.escape(access.csrf, quote=True))

    async def index(request: Request) -> Response:
        return Response(page, media_type="text/html; charset=utf-8")

    job = "/api/jobs/{namespace}/{name}"
    routes = [
        Route("/", index),
        Route("/api/jobs", e(api.jobs)),
        Route("/api/jobs/watch", e(api.watch_jobs)),
        Route(job, e(api.job)),
        Route(f"{job}/watch", e(api.watch_job)),
        Route(f"{job}/yaml", e(api.yaml)),
        Route(f"{job}/logs", e(api.logs)),
        Route(f"{job}/metrics", e(api.metrics)),
        Route(f"{job}/delete", e(api.delete), methods=["POST"]),
        Route("/api/studies", e(api.studies)),
        Route("/api/studies/{name}", e(api.study)),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    return Guard(Starlette(routes=routes), access)


Handler = Callable[[Request], Awaitable[Response]]


def _answers_errors(handler: Handler) -> Handler:
    """A client error as JSON with the status kubectl's would have: 404, 400, else 500."""

    async def handle(request: Request) -> Response:
        try:
            return await handler(request)
        except NotFoundError as err:
            return JSONResponse({"error": str(err)}, status_code=404)
        except (InvalidNameError, ValueError) as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        except TrainopError as err:
            return JSONResponse({"error": str(err)}, status_code=500)

    return handle


class _Api:
    def __init__(self, settings: Settings) -> None:
        self.client = settings.client
        self.namespace = settings.namespace
        self.root = settings.studies

    # --- jobs -------------------------------------------------------------------------------------
    def _rows(self) -> list[dict[str, Any]]:
        jobs = self.client.list(self.namespace)
        return views.job_rows(jobs, self.client.queue_reasons(jobs))

    def _detail(self, name: str, namespace: str) -> dict[str, Any] | None:
        from trainop_core.api.load import default_registry
        from trainop_core.replicas import replica_ids

        try:
            job = self.client.get(name, namespace)
            pods = self.client.replicas(name, namespace)
            events = self.client.events(name, namespace)
        except NotFoundError:
            return None
        try:
            ids = replica_ids(job, default_registry().get(job.kind))
        except LookupError:  # a kind this process does not know (a plugin elsewhere)
            ids = sorted({f"{p.replica_type.lower()}-{p.index}" for p in pods})
        return views.job_detail(job, self.client.queue_reasons([job]), ids, pods, events)

    async def jobs(self, request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(self._rows))

    async def watch_jobs(self, request: Request) -> Response:
        return _events(streams.watch(lambda: run_in_threadpool(self._rows), POLL_SECONDS))

    def _ref(self, request: Request) -> tuple[str, str]:
        """The job a route names; NotFoundError outside the namespace the page is scoped to."""
        name, namespace = request.path_params["name"], request.path_params["namespace"]
        if self.namespace is not None and namespace != self.namespace:
            shown = self.namespace
            raise NotFoundError(f"job {namespace}/{name} not found (this page shows {shown})")
        return name, namespace

    async def job(self, request: Request) -> Response:
        name, namespace = self._ref(request)
        detail = await run_in_threadpool(self._detail, name, namespace)
        if detail is None:
            raise NotFoundError(f"job {namespace}/{name} not found")
        return JSONResponse(detail)

    async def watch_job(self, request: Request) -> Response:
        name, namespace = self._ref(request)
        await run_in_threadpool(self.client.get, name, namespace)  # 404 before streaming
        snapshot = lambda: run_in_threadpool(self._detail, name, namespace)  # noqa: E731
        return _events(streams.watch(snapshot, POLL_SECONDS))

    async def yaml(self, request: Request) -> Response:
        from trainop_core.api.load import dump_yaml

        name, namespace = self._ref(request)
        job = await run_in_threadpool(self.client.get, name, namespace)
        return PlainTextResponse(dump_yaml([job]).rstrip() + "\n")

    async def delete(self, request: Request) -> Response:
        name, namespace = self._ref(request)
        await run_in_threadpool(self.client.delete, name, namespace)
        return JSONResponse({"deleted": f"{namespace}/{name}"})

    async def logs(self, request: Request) -> Response:
        name, namespace = self._ref(request)
        replica = request.query_params.get("replica") or None
        tail = _tail(request.query_params.get("tail"))
        lines = await run_in_threadpool(
            lambda: self.client.logs(name, namespace, replica, follow=True, tail=tail)
        )
        return _events(_pumped((views.log_line(line) for line in lines), "lines"))

    async def metrics(self, request: Request) -> Response:
        name, namespace = self._ref(request)
        lines = await run_in_threadpool(lambda: self.client.logs(name, namespace, follow=True))
        return _events(_pumped(iter(views.metric_points(lines)), "points"))

    # --- studies ----------------------------------------------------------------------------------
    async def studies(self, request: Request) -> Response:
        infos = await run_in_threadpool(_studies().list_studies, self.root)
        return JSONResponse(
            {"root": str(self.root), "studies": [views.study_info_json(i) for i in infos]}
        )

    async def study(self, request: Request) -> Response:
        name = request.path_params["name"]
        info = await run_in_threadpool(_studies().find_study, self.root, name)
        if info is None:
            raise NotFoundError(f"no study {name!r} under {self.root}")
        try:
            study = await run_in_threadpool(_studies().read_study, info)
        except ImportError:
            return JSONResponse({"error": STUDIES_MISSING}, status_code=501)
        return JSONResponse(views.study_json(study, self.client.default_namespace))


def _studies() -> Any:
    """trainop_hpo.study, imported by name: the core never depends on an integration."""
    return importlib.import_module("trainop_hpo.study")


def _tail(raw: str | None) -> int:
    return bounded_int("tail", raw, DEFAULT_TAIL, MAX_TAIL)


def bounded_int(name: str, raw: str | None, default: int, most: int) -> int:
    """A numeric query parameter: absent or empty -> `default`; whole digits from 0 to `most`,
    else ValueError naming it (answered 400)."""
    if raw is None or raw == "":
        return default
    if DIGITS.fullmatch(raw) is None or int(raw) > most:
        raise ValueError(f"{name}: expected a whole number from 0 to {most}, got {raw[:40]!r}")
    return int(raw)


async def _pumped(items: Iterator[Any], name: str) -> AsyncIterator[bytes]:
    """`items` as events of batches, then an event "end"; "failed" with the error's text if the
    client raised."""
    pump: streams.Pump[Any] | None = None
    try:
        pump = streams.Pump(items)
        async for batch in pump.batches():
            yield streams.event(name, batch) if batch else streams.HEARTBEAT
        yield streams.event("end", {})
    except TrainopError as err:
        yield streams.event("failed", {"error": str(err)})
    finally:
        if pump is not None:
            pump.close()


def _events(stream: AsyncIterator[bytes]) -> Response:
    headers = {"x-accel-buffering": "no"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)
