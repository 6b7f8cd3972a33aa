"""The console's routes under ``/ui/`` (docs/console.md): thin, each reading its page's data
through ``ui.views`` (the API's service functions and authorization) for the principal of
the session, and rendering one Jinja2 template (autoescaped).

Every POST (log in, log out) carries the CSRF token of the form; log in refuses a form
without the pre-session token it was served with (a cookie and a hidden field that must
match), so another site cannot log a browser in to its account.
"""

from __future__ import annotations

import hmac
import re
import secrets
from pathlib import Path as FsPath
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import ChoiceLoader, Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool

from modelward.attest.release import TEMPLATES_DIR as RELEASE_TEMPLATES
from modelward.attest.release import shown
from modelward.registry.domains._state import AppState
from modelward.registry.domains.audit.service import append
from modelward.registry.errors import BadRequest, Forbidden
from modelward.registry.ui import api_view, proposal_view, release_view, rollout_view, views
from modelward.registry.ui.release_view import MAX_ROLE_VERSIONS
from modelward.registry.ui.rollback_view import rollback_page
from modelward.registry.ui.sessions import (
    COOKIE,
    LoggedIn,
    end_session,
    open_session,
    require_csrf,
    session_caller,
)

__all__ = ["TEMPLATES", "login_page", "render", "router"]

HERE = FsPath(__file__).resolve().parent
# bidirectional controls (U+202A-U+202E, U+2066-U+2069) and other invisible format
# characters are shown as their code point: a right-to-left override in a name must not
# reorder what the reviewer reads ("exe.png" for "gnp.exe")
_INVISIBLE = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def _visible(value: Any) -> Any:
    if isinstance(value, Markup):  # a macro's output: its values were shown one by one
        return value
    if isinstance(value, str):
        return _INVISIBLE.sub(lambda m: f"<U+{ord(m.group()):04X}>", value)
    return value


TEMPLATES = Environment(
    # the release record's body is attest's, the one `release record --html` writes
    loader=ChoiceLoader(
        [FileSystemLoader(HERE / "templates"), FileSystemLoader(RELEASE_TEMPLATES)]
    ),
    autoescape=select_autoescape(default=True, default_for_string=True),
    finalize=_visible,
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.filters["short"] = lambda d: (str(d)[:19] + "…") if d and len(str(d)) > 20 else d
TEMPLATES.filters["q"] = lambda s: quote(str(s), safe="")
TEMPLATES.filters["shown"] = shown


def _num(value: Any) -> Any:
    """A figure as the gates table shows it: 4 decimals at most, never "-0.0"."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{round(value, 4) + 0.0:g}"
    return value


TEMPLATES.filters["num"] = _num
LOGIN_COOKIE = "mw_login"
MAX_FORM_BYTES = 8192
router = APIRouter(prefix="/ui", include_in_schema=False)


def render(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(TEMPLATES.get_template(name).render(**context), status_code=status)


def _state(request: Request) -> AppState:
    state: AppState = request.app.state.registry
    return state


def _logged_in(request: Request) -> LoggedIn | None:
    """The session's principal; None without a cookie (the page redirects to log in);
    NotAuthenticated (audited) for a cookie that names no live session."""
    sid = request.cookies.get(COOKIE)
    if not sid:
        return None
    with _state(request).db.read() as session:
        who = session_caller(session, sid)
    request.state.caller = who.caller
    return who


def _to_login() -> RedirectResponse:
    return RedirectResponse("/ui/login", status_code=303)


async def _page(request: Request, template: str, build: Any, *args: Any, **kw: Any) -> Response:
    who = await run_in_threadpool(_logged_in, request)
    if who is None:
        return _to_login()
    data = await run_in_threadpool(build, _state(request), who.caller, *args, **kw)
    return render(template, me=who.caller, csrf=who.csrf, **data)


@router.get("/login")
def login_form(request: Request) -> Response:
    return login_page(request)


def login_page(request: Request, *, error: str | None = None, status: int = 200) -> Response:
    """The log in form, with a fresh pre-session CSRF token (a cookie and a hidden field)."""
    token = secrets.token_urlsafe(32)
    response = render("login.html", status, me=None, csrf=token, error=error)
    _cookie(request, response, LOGIN_COOKIE, token, max_age=3600)
    return response


def _cookie(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded form of a POST (its first value per field; at most MAX_FORM_BYTES).
    Read as bytes: the app's NUL check reads the body first (domains/_nul.py)."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise BadRequest(f"form larger than {MAX_FORM_BYTES} bytes", code="too_large")
    try:
        fields = parse_qs(body.decode("ascii"), max_num_fields=10, strict_parsing=False)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadRequest("the form is not urlencoded ASCII") from exc
    form = {k: v[0] for k, v in fields.items()}
    if any("\x00" in v for v in form.values()):
        raise BadRequest("a form field holds a NUL character", code="invalid_value")
    return form


@router.post("/login")
async def login(request: Request) -> Response:
    """Exchange a token (a form field, never a URL) for a session cookie."""
    form = await _form(request)
    expected = request.cookies.get(LOGIN_COOKIE, "")
    given = form.get("csrf", "")
    if not expected or not hmac.compare_digest(given.encode(), expected.encode()):
        raise Forbidden(
            "the login form's CSRF token is missing or wrong: reload the page",
            code="csrf_refused",
        )
    return await run_in_threadpool(_open, request, form.get("token", "").strip())


def _open(request: Request, token: str) -> Response:
    state = _state(request)
    with state.db.write() as session:
        sid, who = open_session(session, token, state.settings.ui_session_seconds)
        append(
            session,
            actor=who.caller.name,
            action="ui.login",
            subject=who.caller.name,
            details={"expires_at": who.expires_at.isoformat()},
        )
    response = RedirectResponse("/ui/", status_code=303)
    _cookie(request, response, COOKIE, sid, max_age=state.settings.ui_session_seconds)
    response.delete_cookie(LOGIN_COOKIE, path="/ui")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    form = await _form(request)
    return await run_in_threadpool(_close, request, form.get("csrf", ""))


def _close(request: Request, csrf: str) -> Response:
    who = _logged_in(request)
    if who is None:
        return _to_login()
    require_csrf(csrf, who)
    with _state(request).db.write() as session:
        end_session(session, request.cookies[COOKIE])
        append(
            session, actor=who.caller.name, action="ui.logout", subject=who.caller.name, details={}
        )
    response = _to_login()
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/api")
def api(request: Request) -> Response:
    """The API reference, public as /openapi.json is (no session needed)."""
    return render("api.html", me=None, csrf="", **api_view.api_page(request.app.openapi()))


@router.get("/")
async def home(request: Request) -> Response:
    return await _page(request, "home.html", views.home)


@router.get("/repos/{org}/{name}")
async def repo(request: Request, org: str, name: str) -> Response:
    return await _page(request, "repo.html", views.repo_page, f"{org}/{name}")


@router.get("/repos/{org}/{name}/aliases/{alias}")
async def alias(request: Request, org: str, name: str, alias: str) -> Response:
    return await _page(request, "alias.html", views.alias_page, f"{org}/{name}", alias)


@router.get("/repos/{org}/{name}/aliases/{alias}/release")
async def release(
    request: Request,
    org: str,
    name: str,
    alias: str,
    version: Annotated[int | None, Query(ge=1, le=MAX_ROLE_VERSIONS)] = None,
) -> Response:
    return await _page(
        request, "release.html", release_view.release_page, f"{org}/{name}", alias, version
    )


@router.get("/repos/{org}/{name}/aliases/{alias}/rollback")
async def rollback(request: Request, org: str, name: str, alias: str) -> Response:
    return await _page(request, "rollback.html", rollback_page, f"{org}/{name}", alias)


@router.get("/repos/{org}/{name}/aliases/{alias}/rollouts/{rollout_id}")
async def rollout(request: Request, org: str, name: str, alias: str, rollout_id: str) -> Response:
    return await _page(
        request, "rollout.html", rollout_view.rollout_page, f"{org}/{name}", alias, rollout_id
    )


@router.get("/repos/{org}/{name}/bundles/{digest}")
async def bundle(request: Request, org: str, name: str, digest: str) -> Response:
    return await _page(request, "bundle.html", views.bundle_page, f"{org}/{name}", digest)


@router.get("/repos/{org}/{name}/bundles/{digest}/attestations")
async def attestations(request: Request, org: str, name: str, digest: str) -> Response:
    return await _page(
        request, "attestations.html", views.attestations_page, f"{org}/{name}", digest
    )


@router.get("/proposals/{proposal_id}")
async def proposal(
    request: Request, proposal_id: Annotated[int, Path(ge=1, le=2**31 - 1)]
) -> Response:
    return await _page(request, "proposal.html", proposal_view.proposal_page, proposal_id)


@router.get("/audit")
async def audit(
    request: Request,
    action: Annotated[str, Query(max_length=100)] = "",
    principal: Annotated[str, Query(max_length=200)] = "",
    repository: Annotated[str, Query(max_length=300)] = "",
) -> Response:
    return await _page(
        request,
        "audit.html",
        views.audit_view,
        action=action.strip(),
        principal=principal.strip(),
        repository=repository.strip(),
    )
