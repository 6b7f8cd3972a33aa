"""Who is calling ``/v2``, with which scopes: the Docker/OCI token flow (docs/oci.md#auth).

``GET /v2/token`` takes HTTP basic auth (principal name + modelward API token) and the
requested ``scope`` parameters (``repository:ORG/NAME:pull,push``, ``registry:catalog:*``).
It grants each requested action the principal may do (``granted``):

- ``pull``: every authenticated principal may read every repository;
- ``push``: the repository exists and the principal may publish to it, may attach some
  attestation there (auth.authz), or is named (by name or role) in an alias rule of
  its policy; what it may then do is decided again by the service it calls;
- ``registry:catalog:*``: every authenticated principal (the catalog lists what it may read);
- anything else (``delete``) is never granted.

The answer is a bearer token ``mwo_<id>_<secret>`` that lives ``TOKEN_TTL`` seconds. Only
sha256 of it is stored (``oci_tokens``), with its scopes and the API token it was issued
against: revoking or expiring that API token, or disabling its principal, ends it at the
next request (checked by the registry's one authentication, ``auth.service``). No anonymous
tokens: the registry has no anonymous reads, so a request without credentials is 401.

A ``/v2`` request authenticates with such a token (restricted to its scopes) or with a
modelward API token directly (``Authorization: Bearer mwt_...``; the principal's role, no
scope restriction).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import Request
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState, iso
from modelward.registry.domains.auth.service import (
    Caller,
    authenticate,
    authenticate_until,
    hash_token,
)
from modelward.registry.domains.oci.errors import OciError
from modelward.registry.domains.repos.listing import readable_repos
from modelward.registry.errors import Forbidden, NotAuthenticated
from modelward.registry.models import OciToken, Repository, Token

__all__ = ["TOKEN_TTL", "OciCaller", "granted", "issue", "oci_caller", "parse_scope"]

TOKEN_TTL = 300  # seconds a token-endpoint bearer lives
TOKEN_PREFIX = "mwo_"  # noqa: S105 - a prefix, not a secret
MAX_SCOPES = 20
SWEEP_BATCH = 200  # expired oci_tokens rows removed per issue
_SCOPE_RE = re.compile(
    r"^(repository):([a-z0-9][a-z0-9._-]{0,99}/[a-z0-9][a-z0-9._-]{0,99}):"
    r"([a-z*]+(?:,[a-z*]+)*)$|^(registry):(catalog):(\*)$"
)
CATALOG = "registry:catalog"


@dataclass(frozen=True)
class OciCaller:
    """The principal, and the scopes its bearer holds (None: an API token, no restriction)."""

    caller: Caller
    scopes: frozenset[tuple[str, str]] | None

    def require(self, resource: str, action: str) -> Caller:
        """The caller, if its token's scopes allow ``action`` on ``resource``; else 403
        DENIED with a challenge for the missing scope (``insufficient_scope``: clients ask
        the token endpoint again)."""
        if self.scopes is not None and (resource, action) not in self.scopes:
            raise OciError(
                403,
                "DENIED",
                f"this token does not grant {action} on {resource}; ask the token endpoint "
                f"for scope {resource}:{action}",
                detail={"error": "insufficient_scope", "resource": resource, "action": action},
            )
        return self.caller


def parse_scope(text: str) -> tuple[str, frozenset[str]]:
    """``(resource, actions)`` of one ``scope`` parameter; 400 UNSUPPORTED when malformed."""
    match = _SCOPE_RE.fullmatch(text)
    if match is None:
        raise OciError(
            400,
            "UNSUPPORTED",
            f"scope {text[:200]!r}: expected repository:ORG/NAME:pull[,push] or registry:catalog:*",
        )
    if match.group(1):
        return f"repository:{match.group(2)}", frozenset(match.group(3).split(","))
    return CATALOG, frozenset({"*"})


def _may_push(session: Session, state: AppState, repo: Repository, caller: Caller) -> bool:
    from modelward.attest.errors import PolicyError
    from modelward.registry.domains.auth.authz import require_may_attach_some
    from modelward.registry.domains.repos.service import may_publish, repo_policy

    if may_publish(session, repo, caller):
        return True
    try:
        require_may_attach_some(session, repo, caller)
        return True
    except Forbidden:
        pass
    try:
        policy = repo_policy(repo, state.default_policy_yaml)
    except (PolicyError, ValueError):
        return False
    # a publisher moves aliases by role only where it publishes (aliases.service, step 1)
    return any(
        caller.name in r.principals or (caller.role in r.roles and caller.role != "publisher")
        for r in policy.aliases
    )


def granted(
    session: Session, state: AppState, caller: Caller, requested: list[str]
) -> list[tuple[str, frozenset[str]]]:
    """The requested scopes narrowed to what ``caller`` may do (module doc)."""
    out: list[tuple[str, frozenset[str]]] = []
    for text in requested[:MAX_SCOPES]:
        resource, actions = parse_scope(text)
        if resource == CATALOG:
            out.append((resource, actions))
            continue
        name = resource.removeprefix("repository:")
        allowed = {"pull"} & actions
        if "push" in actions:
            repo = session.execute(
                readable_repos(caller).where(Repository.name == name)
            ).scalar_one_or_none()
            if repo is not None and _may_push(session, state, repo, caller):
                allowed.add("push")
        out.append((resource, frozenset(allowed)))
    return out


def _basic(request: Request) -> tuple[str, str]:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        raise NotAuthenticated(
            "the token endpoint needs HTTP basic auth: principal name and a modelward API "
            "token (anonymous reads are not allowed)"
        )
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, ValueError) as exc:
        raise NotAuthenticated(
            "Authorization: Basic credentials are not base64 of NAME:TOKEN"
        ) from exc
    if not sep or not user or not password:
        raise NotAuthenticated("Authorization: Basic credentials must be NAME:TOKEN")
    return user, password


def _api_token_id(session: Session, token: str) -> str:
    row = session.execute(select(Token.id).where(Token.secret_hash == hash_token(token))).first()
    if row is None:  # authenticate() succeeded on the same token a moment ago
        raise NotAuthenticated("unknown token")
    return str(row[0])


def issue(
    state: AppState, request: Request, scopes: list[str], service: str | None
) -> dict[str, Any]:
    """Authenticate basic credentials and store a short-lived bearer; the token response."""
    from modelward.registry.domains.audit.service import append
    from modelward.registry.domains.oci.errors import SERVICE

    if service is not None and service != SERVICE:
        raise OciError(
            400, "UNSUPPORTED", f"unknown service {service[:100]!r}: this registry is {SERVICE!r}"
        )
    user, password = _basic(request)
    now = datetime.now(UTC)
    with state.db.write() as session:
        caller = authenticate(session, password)
        request.state.caller = caller
        if caller.name != user:
            raise NotAuthenticated(f"the token does not belong to {user[:200]!r}")
        access = granted(session, state, caller, scopes)
        token_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
        token = f"{TOKEN_PREFIX}{token_id}_{secret}"
        session.execute(
            delete(OciToken).where(
                OciToken.id.in_(
                    select(OciToken.id).where(OciToken.expires_at < now).limit(SWEEP_BATCH)
                )
            )
        )
        session.add(
            OciToken(
                id=token_id,
                secret_hash=hash_token(token),
                principal_id=caller.id,
                api_token_id=_api_token_id(session, password),
                scopes=json.dumps([[r, sorted(a)] for r, a in access]),
                created_at=now,
                expires_at=now + timedelta(seconds=TOKEN_TTL),
            )
        )
        append(
            session,
            actor=caller.name,
            action="oci.token",
            subject=caller.name,
            details={"id": token_id, "scopes": [f"{r}:{','.join(sorted(a))}" for r, a in access]},
        )
    return {
        "token": token,
        "access_token": token,
        "expires_in": TOKEN_TTL,
        "issued_at": iso(now),
        "access": [
            {"type": r.split(":", 1)[0], "name": r.split(":", 1)[1], "actions": sorted(a)}
            for r, a in access
        ],
    }


def _from_oci_token(session: Session, token: str) -> OciCaller:
    """(1) the bearer's row by the hash of the secret; (2) not expired; (3) the API token
    it was issued against, and its principal, pass the registry's one authentication
    (``auth.service.authenticate_until``: not revoked, not expired, not disabled)."""
    # (1): the row
    oci = session.execute(
        select(OciToken).where(OciToken.secret_hash == hash_token(token))
    ).scalar_one_or_none()
    if oci is None:
        raise NotAuthenticated("unknown token")
    # (2): the bearer's own lifetime
    if oci.expires_at <= datetime.now(UTC):
        raise NotAuthenticated(f"token {oci.id} has expired: ask the token endpoint again")
    # (3): the API token behind it, by the same rules as every other request
    caller, _ = authenticate_until(session, token_id=oci.api_token_id, via=f"bearer {oci.id}: API ")
    if caller.id != oci.principal_id:  # pragma: no cover - issue() stores the token's owner
        raise NotAuthenticated(f"token {oci.id} does not belong to {caller.name}")
    scopes = frozenset(
        (resource, action) for resource, actions in json.loads(oci.scopes) for action in actions
    )
    return OciCaller(caller, scopes)


def oci_caller(request: Request, state: AppState) -> OciCaller:
    """Authenticate a ``/v2`` request (module doc); 401 UNAUTHORIZED with the challenge."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise NotAuthenticated(
            "authentication required: get a token from /v2/token "
            "(basic auth: principal name and API token)"
        )
    with state.db.read() as session:
        if token.startswith(TOKEN_PREFIX):
            who = _from_oci_token(session, token)
        else:
            who = OciCaller(authenticate(session, token), None)
    request.state.caller = who.caller
    return who
