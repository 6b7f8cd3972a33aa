"""The console's response headers, its error pages, and how it is mounted on the app."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

__all__ = ["API_PAGE", "CSP", "ConsoleHeaders", "error_page", "install", "is_console_path"]

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
)
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
API_PAGE = "/ui/api"  # the API reference, rendered from the app's OpenAPI schema (pages.api)


def is_console_path(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


class ConsoleHeaders:
    """ASGI middleware: the console's security headers on every ``/ui`` answer."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_console_path(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"
                ]
                message["headers"] = [*kept, *HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


def error_page(request: Request, status: int, code: str, message: str) -> Response:
    """A refused console request as a page (the app's one handler audited it already). A
    refused log in shows the form again with the reason; an ended or unknown session goes
    back to the log in form."""
    from modelward.registry.ui.pages import login_page, render

    if status == 401 and request.url.path == "/ui/login":
        return login_page(request, error=message, status=401)
    if status == 401:
        response: Response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie("mw_session", path="/ui")
        return response
    return render("error.html", status=status, me=None, csrf="", code=code, message=message)


def install(app: FastAPI) -> FastAPI:
    """Mount the console (routes, static files, headers) and send ``/docs`` and ``/redoc``
    to the console's own API reference (no CDN); returns ``app``. Its header middleware
    wraps every other one."""
    from pathlib import Path

    from modelward.registry.ui.pages import router

    app.include_router(router)
    static = Path(__file__).resolve().parent / "static"
    app.mount("/ui/static", StaticFiles(directory=static), name="ui-static")

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return RedirectResponse("/ui/", status_code=307)

    @app.get("/ui", include_in_schema=False)
    def ui_root() -> Response:
        return RedirectResponse("/ui/", status_code=307)

    @app.get("/docs", include_in_schema=False)
    @app.get("/redoc", include_in_schema=False)
    def docs() -> Response:
        # Swagger UI and ReDoc load from a CDN: the registry's own page instead
        return RedirectResponse(API_PAGE, status_code=307)

    app.add_middleware(ConsoleHeaders)
    return app
