"""The registry's FastAPI app, built by ``create_app(settings)`` (no engine at import time).

One exception handler turns every RegistryError (and request validation or routing errors) into
``{"error": {"code", "message", "detail"}}`` and appends a ``denied`` audit event for each refused
request in its own transaction. A small ASGI middleware gives each request an id (echoed as
``X-Request-ID``), logs one JSON line per request (never a token or a payload), counts it
for ``/metrics``, and answers any unexpected exception with a 500 in the same JSON shape
(``internal``, the request id in ``detail``). ``BodyLimit`` (registry.domains._body_limit)
caps every non-streaming request body at ``max_request_json_bytes`` (413 ``too_large``);
``refuse_nul`` (registry.domains._nul), a dependency of every route, answers a NUL character
in a header, path, query or body string with 400 ``invalid_value`` naming the field.
Unauthenticated denials (401, and a NUL refused before any token was shown) pass the
per-address throttle before they are audited.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

from anyio import to_thread
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import DataError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from modelward.registry.db import Database, make_engine
from modelward.registry.domains._body_limit import BodyLimit
from modelward.registry.domains._nul import refuse_nul
from modelward.registry.domains._state import AppState
from modelward.registry.domains._throttle import (
    DenialThrottle,
    client_address,
    throttle_key,
)
from modelward.registry.domains.audit.service import append
from modelward.registry.domains.auth.deps import caller_from_request
from modelward.registry.domains.oci.errors import is_oci_path, oci_error_response
from modelward.registry.domains.signing.tuf.mirror_files import MetadataMirror, open_mirror
from modelward.registry.domains.signing.tuf.store import add_commit_listener
from modelward.registry.errors import ConfigurationError, RegistryError
from modelward.registry.kit.logs import log_failure
from modelward.registry.kit.periodic import Periodic
from modelward.registry.settings import Settings
from modelward.registry.storage import open_store
from modelward.registry.ui import error_page, install_console, is_console_path

__all__ = [
    "build_state",
    "configure_logging",
    "create_app",
    "create_app_from_environment",
    "load_default_policy",
]

log = logging.getLogger("modelward.registry")
AUDITED_STATUSES = frozenset({400, 401, 403, 409, 410, 413, 422, 429})
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def load_default_policy(path: Path | None) -> str | None:
    """The default repository policy text (``--policy FILE``), validated now."""
    if path is None:
        return None
    from modelward.attest.errors import PolicyError
    from modelward.attest.policy import load_policy

    try:
        text = path.read_text(encoding="utf-8")
        load_policy(text.encode(), source=str(path), base_dir=path.resolve().parent)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read policy {path}: {exc}") from exc
    except PolicyError as exc:
        raise ConfigurationError(f"invalid default policy: {exc}") from exc
    return text


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if message.startswith("{"):
            payload: dict[str, Any] = json.loads(message)
        else:
            payload = {"event": "log", "message": message}
        payload = {"level": record.levelname.lower(), "logger": record.name, **payload}
        if record.exc_info:
            payload["exc_type"] = record.exc_info[0].__name__ if record.exc_info[0] else None
        return json.dumps(payload)


def configure_logging(level: str) -> None:
    """One JSON line per record on stderr for the registry's and uvicorn's loggers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter())
    for name in ("modelward.registry", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.propagate = False
        logger.setLevel(level.upper())


def build_state(settings: Settings) -> AppState:
    engine = make_engine(
        settings.resolved_database_url(),
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
    )
    store = open_store(settings.resolved_blob_store(), endpoint_url=settings.s3_endpoint_url)
    return AppState(
        settings=settings,
        db=Database(engine),
        store=store,
        default_policy_yaml=load_default_policy(settings.policy),
        default_policy_dir=settings.policy.resolve().parent if settings.policy else None,
        denial_throttle=DenialThrottle(settings.audit_unauthenticated_per_minute),
    )


class _Observe:
    """ASGI middleware: request id, one JSON log line, Prometheus counters."""

    def __init__(self, app: Any, requests: Counter, latency: Histogram) -> None:
        self.app = app
        self.requests = requests
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next(
            (v.decode("latin-1") for k, v in scope.get("headers") or () if k == b"x-request-id"),
            "",
        )
        printable = given.isascii() and given.isprintable()  # never a NUL into a log or row
        request_id = given if printable and 0 < len(given) <= 64 else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500
        started = time.perf_counter()
        responded = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, responded
            if message["type"] == "http.response.start":
                responded = True
                status = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [
                    *message["headers"],
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as exc:
            # Every 500 keeps the JSON error shape; the log names the request and where it
            # failed, never the exception's message (it may quote the payload).
            frames = traceback.extract_tb(exc.__traceback__)[-5:]
            at = [f"{f.filename}:{f.lineno} {f.name}" for f in frames]
            log_failure(log, "error", exc, message=None, request_id=request_id, at=at)
            if responded:
                raise
            await send_wrapper(_internal_error(request_id))
            await send_wrapper({"type": "http.response.body", "body": _internal_body(request_id)})
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            self.requests.labels(scope["method"], template, str(status)).inc()
            self.latency.labels(scope["method"], template).observe(elapsed)
            if log.isEnabledFor(logging.INFO):
                caller = scope.get("state", {}).get("caller")
                log.info(
                    json.dumps(
                        {
                            "event": "request",
                            "request_id": request_id,
                            "method": scope["method"],
                            "path": scope["path"],
                            "route": template,
                            "status": status,
                            "principal": getattr(caller, "name", None),
                            "duration_ms": round(elapsed * 1000, 2),
                        }
                    )
                )


class _ReuseCollector(Collector):
    """What the registry did not compute again (registry/domains/_verdict_cache.py)."""

    def __init__(self, state: AppState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        evidence = CounterMetricFamily(
            "modelward_bundle_evidence",
            "bundle evidence (scan, attestations) recalled (hit) or computed, this process",
            labels=["result"],
        )
        for result, count in sorted(self.state.verdicts.stats.items()):
            evidence.add_metric([result], count)
        yield evidence
        yield CounterMetricFamily(
            "modelward_dry_runs_unaudited",
            "dry runs counted, not audited (repeated, or over the per-minute bound)",
            value=self.state.dry_runs.unaudited,
        )


def _internal_body(request_id: str) -> bytes:
    message = f"internal error (request id {request_id}); the server log has the details"
    body = {"error": {"code": "internal", "message": message, "detail": {"request_id": request_id}}}
    return json.dumps(body).encode()


def _internal_error(request_id: str) -> Message:
    return {
        "type": "http.response.start",
        "status": 500,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(_internal_body(request_id))).encode()),
        ],
    }


def _record_denial(state: AppState, request: Request, status: int, code: str, msg: str) -> None:
    """Append a ``denied`` event; unauthenticated ones (401, an anonymous NUL refusal)
    pass the throttle first."""
    caller = getattr(request.state, "caller", None)
    details: dict[str, Any] = {
        "status": status,
        "code": code,
        "message": msg[:1000],
        "request_id": getattr(request.state, "request_id", None),
    }
    # the path as the client sent it, less what no database text column can hold
    path = request.url.path.replace("\x00", "%00")
    action, subject = "denied", f"{request.method} {path}"
    if caller is None and (status == 401 or code == "invalid_value"):
        # the peer, or what a trusted proxy says it forwarded (never the client's own say)
        client = throttle_key(
            client_address(
                request.client.host if request.client else None,
                request.headers.getlist("x-forwarded-for"),
                state.settings.trusted_proxies,
            )
        )
        verdict, earlier = state.denial_throttle.check(client)
        if verdict == "skip":
            return
        if verdict == "announce":
            limit = state.denial_throttle.per_minute
            log.warning(json.dumps({"event": "audit_throttled", "client": client, "limit": limit}))
            action, subject = "denied.throttled", client
            details = {
                "client": client,
                "limit_per_minute": limit,
                "note": "further unauthenticated denials from this client in this "
                "minute are counted, not audited",
            }
        elif earlier:
            details["throttled_before"] = earlier
    with state.db.write() as session:
        append(
            session,
            actor=getattr(caller, "name", "anonymous"),
            action=action,
            subject=subject,
            details=details,
        )


async def _error_response(
    request: Request,
    status: int,
    code: str,
    message: str,
    detail: Any,
    *,
    headers: dict[str, str] | None = None,
) -> Response:
    state: AppState = request.app.state.registry
    if status in AUDITED_STATUSES:
        try:
            await run_in_threadpool(_record_denial, state, request, status, code, message)
        except Exception:
            log.exception("could not audit a denied request")
    if is_console_path(request.url.path):  # /ui/: a page, or back to the log in form
        return error_page(request, status, code, message)
    if is_oci_path(request.url.path):  # /v2: OCI error bodies and the Bearer challenge
        return oci_error_response(request, status, code, message, detail, headers=headers)
    headers = {**(headers or {}), **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
    return JSONResponse(
        {"error": {"code": code, "message": message, "detail": detail}},
        status_code=status,
        headers=headers,
    )


def create_app_from_environment() -> FastAPI:
    """The app of one ``serve --workers N`` worker process (uvicorn's factory).

    Its settings come from ``WORKER_SETTINGS_ENV``, which the parent set after it migrated
    the schema and bootstrapped the admin. Raises ConfigurationError when that is missing.
    """
    from modelward.registry.settings import WORKER_SETTINGS_ENV, settings_from_json

    text = os.environ.get(WORKER_SETTINGS_ENV)
    if not text:
        raise ConfigurationError(f"{WORKER_SETTINGS_ENV} is not set: start with `modelward serve`")
    settings = settings_from_json(text)
    configure_logging(settings.log_level)
    _end_with_supervisor(os.getppid())
    return create_app(settings)


def _end_with_supervisor(supervisor: int, interval: float = 0.5) -> None:
    """End this worker when its ``serve`` supervisor is gone.

    A ``kill -9`` of the supervisor must not leave its workers answering on the port and
    writing to the database (a restarted ``serve`` could not bind, and a crash test would
    talk to the orphans): a daemon thread watches the parent and, once the worker has been
    handed to another parent, asks uvicorn to shut down (SIGTERM), then exits hard.
    """

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(interval)
        log.warning("supervisor %d is gone: this worker shuts down", supervisor)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        os._exit(1)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


@contextlib.asynccontextmanager
async def _lifespan(app: FastAPI, settings: Settings) -> AsyncIterator[None]:
    # Blocking work (database, files) runs on this many threads per process: past a few,
    # more threads only contend for the GIL (docs/performance.md#registry).
    to_thread.current_default_thread_limiter().total_tokens = settings.threads
    stop = threading.Event()
    # the metadata as static files after every TUF commit of this process (docs/tuf.md#mirrors)
    mirror: MetadataMirror = app.state.tuf_mirror
    unlisten = add_commit_listener(mirror.on_commit)
    state: AppState = app.state.registry
    upkeep = _TufUpkeep(state, mirror)
    interval = state.settings.tuf_refresh_interval_seconds
    Periodic(interval, upkeep, log, "tuf_refresh_failed", at_start=True).start("tuf-refresh", stop)
    # signed webhooks: this process's delivery loop (docs/webhooks.md#delivery)
    from modelward.registry.domains.webhooks.delivery import start_delivery

    start_delivery(state, stop)
    # the rollout controller: judges the rollouts under way (docs/rollouts.md#analysis)
    from modelward.registry.domains.rollouts.controller import start_controller

    start_controller(state, stop)
    # fleet reports and finished webhook messages past their retention (docs/operations.md)
    from modelward.registry.domains.retention import start_retention

    start_retention(state, stop)
    try:
        yield
    finally:
        stop.set()
        unlisten()


class _TufUpkeep:
    """The TUF root exists, and snapshot and timestamp are re-signed past half their
    lifetime, without anyone acting (docs/tuf.md#keys); run every
    ``tuf_refresh_interval_seconds`` by ``kit.periodic``, which logs a failure and retries.
    The metadata mirror gets the full current set at start, and again at every run while
    its last sync failed (docs/tuf.md#mirrors)."""

    def __init__(self, state: AppState, mirror: MetadataMirror) -> None:
        self.state, self.mirror, self.first = state, mirror, True

    def __call__(self) -> None:
        from modelward.registry.domains.signing.online import ensure_root
        from modelward.registry.domains.signing.publish import refresh

        try:
            if self.first:
                ensure_root(self.state)
            refresh(self.state)
        finally:
            if self.first or self.mirror.failing:
                self.mirror.sync()  # never raises: logged and counted
            self.first = False


# What an anonymous scrape (``metrics_public``) gets: an allow-list, so that a metric added
# later is for token holders until someone lists it here (docs/registry.md#metrics).
PUBLIC_METRICS = frozenset({"modelward_http_requests", "modelward_http_request_seconds"})


class _Listed(Collector):
    """The families of ``metrics`` named in ``names``, nothing else."""

    def __init__(self, metrics: CollectorRegistry, names: frozenset[str]) -> None:
        self.metrics, self.names = metrics, names

    def collect(self) -> Iterator[Metric]:
        return (family for family in self.metrics.collect() if family.name in self.names)


def _metrics_text(request: Request, st: AppState, metrics: CollectorRegistry) -> bytes:
    """``/metrics``: for a caller with a token, every metric of this process and the domain
    gauges (registry/domain_metrics.py); without one (``metrics_public``), only those
    ``PUBLIC_METRICS`` lists (docs/registry.md#metrics)."""
    from modelward.registry.domain_metrics import domain_metrics

    if st.settings.metrics_public and "authorization" not in request.headers:
        return generate_latest(_Listed(metrics, PUBLIC_METRICS))
    caller = caller_from_request(request, st)
    return generate_latest(metrics) + domain_metrics(st, caller)


def _domain_collectors(app: FastAPI, metrics: CollectorRegistry) -> None:
    """The domain collectors on ``metrics``: what was reused, and the app's TUF metadata
    mirror (``app.state.tuf_mirror``, opened here; docs/tuf.md#mirrors)."""
    st: AppState = app.state.registry
    metrics.register(_ReuseCollector(st))
    app.state.tuf_mirror = open_mirror(st.settings, st.db, st.store)
    metrics.register(app.state.tuf_mirror.collector())


def create_app(settings: Settings, state: AppState | None = None) -> FastAPI:  # noqa: PLR0915 - one import per router
    """Build the app; ``state`` defaults to ``build_state(settings)``."""
    from modelward.registry.domains.aliases.endpoints import router as aliases
    from modelward.registry.domains.aliases.gates_view import router as gates
    from modelward.registry.domains.attestations.endpoints import router as attestations
    from modelward.registry.domains.audit.endpoints import router as audit
    from modelward.registry.domains.blobs.endpoints import router as blobs
    from modelward.registry.domains.boots.endpoints import router as boots
    from modelward.registry.domains.bundles.endpoints import router as bundles
    from modelward.registry.domains.gc.endpoints import router as storage
    from modelward.registry.domains.keys.endpoints import router as keys
    from modelward.registry.domains.oci.endpoints import router as oci
    from modelward.registry.domains.orgs.endpoints import router as orgs
    from modelward.registry.domains.principals.endpoints import router as principals
    from modelward.registry.domains.repos.endpoints import router as repos
    from modelward.registry.domains.rollouts.endpoints import router as rollouts
    from modelward.registry.domains.rollouts.report_endpoints import router as rollout_reports
    from modelward.registry.domains.signing.endpoints import router as trust
    from modelward.registry.domains.signing.quarantine_endpoint import router as quarantine
    from modelward.registry.domains.uploads.endpoints import router as uploads
    from modelward.registry.domains.webhooks.endpoints import router as webhooks

    app = FastAPI(
        title="modelward registry",
        version="1",
        description="Immutable model bundles, alias publishing, tamper-evident audit log.",
        lifespan=lambda app: _lifespan(app, settings),
        # before any route reads the database: no NUL in a header, path, query or body
        dependencies=[Depends(refuse_nul)],
        # Swagger UI and ReDoc load from a CDN: off; /docs and /redoc say why (registry/ui)
        docs_url=None,
        redoc_url=None,
    )
    app.state.registry = state or build_state(settings)
    metrics = CollectorRegistry()
    requests = Counter(
        "modelward_http_requests", "HTTP requests", ["method", "route", "status"], registry=metrics
    )
    latency = Histogram(
        "modelward_http_request_seconds", "HTTP latency", ["method", "route"], registry=metrics
    )
    _domain_collectors(app, metrics)
    # each domain's routes as its router built them (domains/_router.py): NUL refused first,
    # the error body documented; /v2 answers OCI error bodies (domains/oci/errors.py)
    for router in (
        principals,
        keys,
        orgs,
        repos,
        blobs,
        uploads,
        bundles,
        quarantine,
        attestations,
        aliases,
        gates,
        audit,
        boots,
        storage,
        trust,
        rollouts,
        rollout_reports,
        webhooks,
        oci,
    ):
        app.router.routes.extend(router.routes)

    @app.exception_handler(RegistryError)
    async def _registry_error(request: Request, exc: RegistryError) -> Response:
        return await _error_response(request, exc.status, exc.code, exc.message, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg"))}
            for e in exc.errors()
        ]
        first = problems[0] if problems else {"loc": [], "msg": "invalid"}
        message = f"invalid request: {'.'.join(first['loc'])}: {first['msg']}"
        return await _error_response(request, 422, "invalid_request", message, problems)

    @app.exception_handler(DataError)
    async def _unstorable(request: Request, exc: DataError) -> Response:
        # A value the database cannot hold (PostgreSQL: a NUL character in text, a number out
        # of its column's range) is bad input, never a 500. The message never quotes it.
        message = (
            "invalid request: a value in it cannot be stored "
            f"({type(exc.orig).__name__}); text may not contain NUL characters"
        )
        return await _error_response(request, 400, "invalid_value", message, None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        codes = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "too_large"}
        code = codes.get(exc.status_code, "http_error")
        # keep what the framework says with it (405: Allow)
        return await _error_response(
            request,
            exc.status_code,
            code,
            str(exc.detail),
            None,
            headers=dict(exc.headers or {}),
        )

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"])
    def readyz() -> JSONResponse:
        st: AppState = app.state.registry
        try:
            st.db.ping()
            st.store.check()
        except Exception as exc:  # noqa: BLE001 - readiness reports any dependency failure
            return JSONResponse(
                {"status": "unavailable", "reason": type(exc).__name__}, status_code=503
            )
        return JSONResponse({"status": "ready"})

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=PlainTextResponse,
        responses={
            200: {
                "content": {CONTENT_TYPE_LATEST.split(";")[0]: {}},
                "description": "Prometheus text exposition format",
            }
        },
    )
    def prometheus(request: Request) -> PlainTextResponse:
        body = _metrics_text(request, app.state.registry, metrics)
        return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)

    registry_state: AppState = app.state.registry
    app.add_middleware(BodyLimit, limit=registry_state.settings.max_request_json_bytes)
    # /tuf/ reads memory can answer skip the routing, inside the request log and metrics
    from modelward.registry.domains.signing.fast_path import install as install_tuf_fast_path

    install_tuf_fast_path(app, registry_state)
    app.add_middleware(_Observe, requests=requests, latency=latency)
    return install_console(app)  # /ui/: the reviewer console (registry/ui, docs/console.md)
