"""The one HTTP client for the modelward registry (the CLI and the loader both use it).

Errors (see ``client.errors`` for the drawn tree)::

    RegistryClientError > ClientConfigError | InvalidReference | UnknownRepository
                        | TransportError
                        | BlobIntegrityError | ResponseTooLarge
                        | APIError > BadRequestError | UnauthorizedError | ForbiddenError
                                   | NotFoundError | ConflictError(.current)

Every method maps to one endpoint of the registry API (docs: /v1, bearer token, JSON errors);
``push`` and ``unsafe_fetch`` compose them. The client reads no environment: the CLI resolves
settings (``client.config.resolve_settings``) and passes URL and token in.

Nothing the registry sends is read without a bound: an answer read into memory stops at
``TransferOptions.max_response_bytes`` (``get_manifest`` at its ``max_bytes``) with
``ResponseTooLarge``; a blob download stops at the size the manifest states with
``BlobIntegrityError``. Bodies are read as sent (``Accept-Encoding: identity``; a compressed
answer is refused), so no decompression can multiply them.

``unsafe_fetch`` checks digests only, never signatures or policy, and warns
(``UnsafeFetchWarning``); a verified bundle comes from ``modelward pull``
(``loader.pull.pull_bundle``).
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

if TYPE_CHECKING:
    from tuf.ngclient import FetcherInterface

from modelward.attest.digest import HashedBytes
from modelward.client.blobs import BlobSource, BlobTransfer
from modelward.client.bundles import PushResult, push_bundle, unsafe_fetch_bundle
from modelward.client.config import Reference, parse_reference, parse_repo
from modelward.client.connection import TransferOptions
from modelward.client.errors import (
    APIError,
    BadRequestError,
    BlobIntegrityError,
    ClientConfigError,
    ConflictError,
    ForbiddenError,
    InvalidReference,
    NotFoundError,
    RegistryClientError,
    ResponseTooLarge,
    TransportError,
    UnauthorizedError,
    UnknownRepository,
)
from modelward.client.listing import ListingMixin, repo_path
from modelward.client.rollouts import RolloutsMixin
from modelward.client.webhooks import WebhooksMixin

__all__ = [
    "APIError",
    "BadRequestError",
    "BlobIntegrityError",
    "ClientConfigError",
    "ConflictError",
    "ForbiddenError",
    "InvalidReference",
    "NotFoundError",
    "PushResult",
    "Reference",
    "RegistryClient",
    "RegistryClientError",
    "ResponseTooLarge",
    "TransferOptions",
    "TransportError",
    "UnauthorizedError",
    "parse_reference",
    "parse_repo",
]

Progress = Callable[[int], None]
JSON = dict[str, Any]

# The default bound on manifest bytes, the same as ``attest.manifest.ManifestLimits.max_bytes``
# and the registry's own ``max_manifest_bytes``; the loader passes its policy's limit instead.
MAX_MANIFEST_BYTES = 16 * 2**20
# A mistyped repository name suggests up to this many close names (difflib), read from at most
# this many repositories the caller may read.
MAX_SUGGESTIONS = 3
MAX_SUGGESTION_SCAN = 2000


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class RegistryClient(ListingMixin, RolloutsMixin, WebhooksMixin):
    """A synchronous registry client. Thread-safe (one pooled ``httpx.Client``).

    Raises ``TransportError`` when a request gets no answer and an ``APIError`` subclass when
    the server refuses; never returns an error value.
    """

    def __init__(
        self,
        url: str,
        token: str | None,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        options: TransferOptions = TransferOptions(),
    ) -> None:
        super().__init__(url, token, timeout=timeout, transport=transport, options=options)
        self.blobs = BlobTransfer(self, options)

    # -- service ---------------------------------------------------------------------------
    def healthz(self) -> Any:
        """GET /healthz."""
        return self._json("GET", "/healthz")

    def readyz(self) -> Any:
        """GET /readyz."""
        return self._json("GET", "/readyz")

    def metrics(self) -> str:
        """GET /metrics (Prometheus text)."""
        return self._request("GET", "/metrics").text

    def whoami(self) -> JSON:
        """GET /v1/whoami -> {principal, role}."""
        result: JSON = self._json("GET", "/v1/whoami")
        return result

    # -- admin: principals and tokens ------------------------------------------------------
    def create_principal(self, name: str, role: str) -> Any:
        """POST /v1/admin/principals."""
        return self._json("POST", "/v1/admin/principals", json_body={"name": name, "role": role})

    def list_principals(self) -> Any:
        """GET /v1/admin/principals."""
        return self._json("GET", "/v1/admin/principals")

    def create_token(self, principal: str, expires_in_seconds: int | None = None) -> JSON:
        """POST /v1/admin/principals/{name}/tokens -> {id, token} (the token is shown once)."""
        body: JSON = {}
        if expires_in_seconds is not None:
            body["expires_in_seconds"] = expires_in_seconds
        path = f"/v1/admin/principals/{quote(principal, safe='')}/tokens"
        result: JSON = self._json("POST", path, json_body=body)
        return result

    def revoke_token(self, token_id: str) -> None:
        """DELETE /v1/admin/tokens/{id}."""
        self._request("DELETE", f"/v1/admin/tokens/{quote(str(token_id), safe='')}")

    def list_tokens(self, principal: str | None = None) -> Any:
        """GET /v1/admin/tokens[?principal=NAME]: id, principal, created_at, expires_at,
        revoked_at of each token (never a secret)."""
        params = {"principal": principal} if principal is not None else None
        return self._json("GET", "/v1/admin/tokens", params=params)

    def set_principal_role(self, principal: str, role: str, *, force: bool = False) -> JSON:
        """PUT /v1/admin/principals/{name}/role {role}; ``force``: even if it leaves signed
        targets short of their threshold (409 ``signers_would_be_short`` without)."""
        path = f"/v1/admin/principals/{quote(principal, safe='')}/role"
        result: JSON = self._json("PUT", path, json_body={"role": role}, params=_forced(force))
        return result

    def set_principal_disabled(
        self, principal: str, disabled: bool, *, force: bool = False
    ) -> JSON:
        """POST /v1/admin/principals/{name}/disable (or /enable); ``force``: as
        ``set_principal_role`` (disabling only)."""
        verb = "disable" if disabled else "enable"
        result: JSON = self._json(
            "POST",
            f"/v1/admin/principals/{quote(principal, safe='')}/{verb}",
            params=_forced(force and disabled),
        )
        return result

    # -- keys and identities ---------------------------------------------------------------
    def register_key(self, public_key_pem: str, principal: str | None = None) -> JSON:
        """POST /v1/keys -> {keyid}."""
        body: JSON = {"public_key_pem": public_key_pem}
        if principal is not None:
            body["principal"] = principal
        result: JSON = self._json("POST", "/v1/keys", json_body=body)
        return result

    def list_keys(self) -> Any:
        """GET /v1/keys."""
        return self._json("GET", "/v1/keys")

    def revoke_key(self, keyid: str, *, force: bool = False) -> None:
        """DELETE /v1/keys/{keyid}; ``force``: even if it leaves signed targets short of
        their threshold (409 ``signers_would_be_short`` without)."""
        self._request("DELETE", f"/v1/keys/{quote(keyid, safe='')}", params=_forced(force))

    def register_identity(self, identity: str, issuer: str, principal: str | None = None) -> Any:
        """POST /v1/identities."""
        body: JSON = {"identity": identity, "issuer": issuer}
        if principal is not None:
            body["principal"] = principal
        return self._json("POST", "/v1/identities", json_body=body)

    def list_identities(self) -> Any:
        """GET /v1/identities."""
        return self._json("GET", "/v1/identities")

    # -- repositories ----------------------------------------------------------------------
    def create_repo(
        self, name: str, policy_yaml: str | None = None, *, private: bool | None = None
    ) -> Any:
        """POST /v1/repos (``private`` None: the org's default)."""
        body: JSON = {"name": parse_repo(name)}
        if policy_yaml is not None:
            body["policy_yaml"] = policy_yaml
        if private is not None:
            body["private"] = private
        return self._json("POST", "/v1/repos", json_body=body)

    def set_repo_visibility(self, name: str, *, private: bool) -> Any:
        """PUT /v1/repos/{org}/{name}/visibility {private} (the org's owners, admins)."""
        return self._json("PUT", f"{repo_path(name)}/visibility", json_body={"private": private})

    def grant_read(self, name: str, principal: str) -> Any:
        """POST /v1/repos/{org}/{name}/readers {principal} (the org's owners, admins)."""
        return self._json("POST", f"{repo_path(name)}/readers", json_body={"principal": principal})

    def revoke_read(self, name: str, principal: str) -> Any:
        """DELETE /v1/repos/{org}/{name}/readers/{principal} (the org's owners, admins)."""
        return self._json("DELETE", f"{repo_path(name)}/readers/{quote(principal, safe='')}")

    def get_repo(self, name: str) -> Any:
        """GET /v1/repos/{org}/{name}."""
        return self._json("GET", repo_path(name))

    def check_repository(self, name: str) -> None:
        """Raise ``UnknownRepository`` when the registry has no repository ``name`` the caller
        may read, naming the closest names among those it may read (``GET /v1/repos``, at most
        ``MAX_SUGGESTION_SCAN`` of them); other errors as the request raises them."""
        try:
            self.get_repo(name)
            return
        except NotFoundError:
            pass
        try:
            names = [
                str(repo.get("name"))
                for repo in itertools.islice(self.iter_repos(), MAX_SUGGESTION_SCAN)
            ]
        except APIError:  # no listing to suggest from: the fact alone
            names = []
        close = difflib.get_close_matches(name, names, n=MAX_SUGGESTIONS, cutoff=0.6)
        raise UnknownRepository(name, tuple(close))

    def set_policy(self, name: str, policy_yaml: str, *, force: bool = False) -> Any:
        """PUT /v1/repos/{org}/{name}/policy (admin only); ``force``: even if it leaves
        signed targets short of their threshold (409 ``signers_would_be_short`` without)."""
        return self._json(
            "PUT",
            f"{repo_path(name)}/policy",
            json_body={"policy_yaml": policy_yaml},
            params=_forced(force),
        )

    def add_publisher(self, name: str, principal: str) -> Any:
        """POST /v1/repos/{org}/{name}/publishers {principal} (admin only)."""
        return self._json(
            "POST", f"{repo_path(name)}/publishers", json_body={"principal": principal}
        )

    def remove_publisher(self, name: str, principal: str, *, force: bool = False) -> Any:
        """DELETE /v1/repos/{org}/{name}/publishers/{principal} (admin only); ``force``: as
        ``set_policy``."""
        return self._json(
            "DELETE",
            f"{repo_path(name)}/publishers/{quote(principal, safe='')}",
            params=_forced(force),
        )

    # -- blobs -----------------------------------------------------------------------------
    def blob_size(self, digest: str) -> int | None:
        """HEAD /v1/blobs/{digest}: its size, or None when absent."""
        return self.blobs.blob_size(digest)

    def put_blob(self, digest: str, data: bytes, *, repository: str) -> None:
        """PUT /v1/blobs/{digest}?repository=ORG/NAME with bytes in memory (unless HEAD finds
        the blob present), charged to ``repository``'s quota (one the caller may publish
        to)."""
        self.blobs.upload(
            BlobSource(digest=digest, size=len(data), data=data, repository=repository)
        )

    def upload_file(
        self, path: Path, digest: str, progress: Progress | None = None, *, repository: str
    ) -> bool:
        """Upload a file as blob ``digest`` for ``repository`` (charged to its quota) unless
        present (resumable when large); True when bytes were sent."""
        source = BlobSource(
            digest=digest, size=path.stat().st_size, path=path, repository=repository
        )
        return self.blobs.upload(source, progress)

    def get_blob(self, digest: str) -> bytes:
        """GET /v1/blobs/{digest} into memory, verified (for small blobs such as configs).

        Reads at most ``options.max_response_bytes`` (``ResponseTooLarge`` past it); raises
        ``BlobIntegrityError`` when the bytes do not hash to ``digest``.
        """
        data = self._request("GET", f"/v1/blobs/{digest}", what=f"blob {digest}").content
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if actual != digest:
            raise BlobIntegrityError(digest, actual, len(data), None)
        return data

    def download_blob(
        self, digest: str, dest: Path, *, size: int, progress: Progress | None = None
    ) -> Path:
        """Stream blob ``digest`` of ``size`` bytes (as the manifest states) into ``dest``.

        Resumes with Range from ``.<dest>.partial``; never writes more than ``size`` bytes;
        renames into place only after the size and digest check. Returns ``dest``.
        Raises ``BlobIntegrityError`` (the server sent more or fewer bytes, or other bytes;
        nothing kept), ``TransportError`` (still cut after the retries), ``APIError``.
        """
        return self.blobs.download(digest, dest, expected_size=size, progress=progress)

    # -- bundles ---------------------------------------------------------------------------
    def put_bundle(
        self, repo: str, digest: str, manifest: bytes, attestations: Sequence[bytes] = ()
    ) -> JSON:
        """PUT a manifest (exact bytes) with attestations -> {digest, decision}."""
        body = {"manifest": _b64(manifest), "attestations": [_b64(a) for a in attestations]}
        result: JSON = self._json("PUT", f"{repo_path(repo)}/bundles/{digest}", json_body=body)
        return result

    def get_bundle(self, repo: str, digest: str) -> JSON:
        """GET the bundle record (manifest base64, quarantine and tombstone state...)."""
        result: JSON = self._json("GET", f"{repo_path(repo)}/bundles/{digest}")
        return result

    def get_manifest(
        self, repo: str, digest: str, *, max_bytes: int = MAX_MANIFEST_BYTES
    ) -> HashedBytes:
        """GET the exact manifest bytes of ``repo@digest``, checked against ``digest``; they
        come back as ``HashedBytes`` carrying that digest, so parsing them hashes nothing again.

        Streams the answer and stops as soon as more than ``max_bytes`` arrived. Raises
        ``ResponseTooLarge`` (naming the repository, digest and limit), ``BlobIntegrityError``
        (the bytes do not hash to ``digest``), ``NotFoundError`` and other ``APIError``s,
        ``TransportError``.
        """
        data = self._request(
            "GET",
            f"{repo_path(repo)}/bundles/{digest}/manifest",
            max_bytes=max_bytes,
            what=f"manifest of {repo}@{digest}",
        ).content
        received = HashedBytes(data)  # hashed here, once; the digest travels with the bytes
        if received.digest != digest:
            raise BlobIntegrityError(digest, received.digest, len(data), None)
        return received

    def add_attestation(self, repo: str, digest: str, data: bytes) -> JSON:
        """POST an attestation (raw bytes) -> {id, kind, predicate_type}."""
        path = f"{repo_path(repo)}/bundles/{digest}/attestations"
        result: JSON = self._json("POST", path, content=data)
        return result

    def bundle_gates(self, repo: str, digest: str) -> JSON:
        """GET what the release gates of ``repo``'s gated aliases say of a bundle now, as if
        its publisher moved each alias there (``{repository, digest, aliases: [{alias,
        current, verdict, gates, evaluations, not_counted}]}``); nothing moves."""
        path = f"{repo_path(repo)}/bundles/{digest}/gates"
        result: JSON = self._json("GET", path, what=f"gates of {repo}@{digest}")
        return result

    def list_attestations(self, repo: str, digest: str) -> list[JSON]:
        """GET the attestations of a bundle ([{id, kind, predicate_type, data}]).

        Reads at most ``options.max_response_bytes`` (``ResponseTooLarge`` past it).
        """
        path = f"{repo_path(repo)}/bundles/{digest}/attestations"
        result: list[JSON] = self._json("GET", path, what=f"attestations of {repo}@{digest}")
        return result

    def quarantine(self, repo: str, digest: str, reason: str) -> Any:
        """POST .../quarantine {reason} (admin or reviewer)."""
        path = f"{repo_path(repo)}/bundles/{digest}/quarantine"
        return self._json("POST", path, json_body={"reason": reason})

    def lift_quarantine(self, repo: str, digest: str, reason: str) -> Any:
        """POST .../quarantine/lift {reason} (admin or reviewer) -> {lifted, proposal}."""
        path = f"{repo_path(repo)}/bundles/{digest}/quarantine/lift"
        return self._json("POST", path, json_body={"reason": reason})

    def tombstone(self, repo: str, digest: str, reason: str) -> Any:
        """DELETE a bundle (admin tombstone, audited)."""
        path = f"{repo_path(repo)}/bundles/{digest}"
        return self._json("DELETE", path, json_body={"reason": reason})

    def approve(self, repo: str, digest: str, alias: str) -> Any:
        """POST .../approvals {alias}: a reviewer approves ``digest`` for ``alias``."""
        path = f"{repo_path(repo)}/bundles/{digest}/approvals"
        return self._json("POST", path, json_body={"alias": alias})

    def report_boot(
        self,
        repo: str,
        digest: str,
        *,
        fingerprint_id: str,
        fingerprint: Any,
        outcome: str,
        detail: Any = None,
    ) -> Any:
        """POST .../boots: a serving worker's boot report."""
        body = {
            "fingerprint_id": fingerprint_id,
            "fingerprint": fingerprint,
            "outcome": outcome,
            "detail": detail,
        }
        return self._json("POST", f"{repo_path(repo)}/bundles/{digest}/boots", json_body=body)

    # -- aliases ---------------------------------------------------------------------------
    def get_alias(self, repo: str, alias: str) -> JSON:
        """GET an alias -> {alias, digest, version}."""
        result: JSON = self._json("GET", f"{repo_path(repo)}/aliases/{quote(alias, safe='')}")
        return result

    def alias_version(self, repo: str, alias: str) -> int:
        """The alias's current version, 0 when it does not exist yet."""
        try:
            return int(self.get_alias(repo, alias)["version"])
        except NotFoundError:
            return 0

    def set_alias(
        self,
        repo: str,
        alias: str,
        digest: str,
        *,
        expected_version: int | None = None,
        reason: str | None = None,
        rollback: bool = False,
        propose: bool = False,
    ) -> JSON:
        """Compare-and-swap an alias; ``expected_version=None`` reads the version first.
        ``propose``: a protected alias short of approvals answers with ``pending``, the
        proposal its reviewers sign, instead of a refusal.

        Raises ``ConflictError`` (with ``.current``) when another writer moved it in between.
        """
        if expected_version is None:
            expected_version = self.alias_version(repo, alias)
        body: JSON = {
            "digest": digest,
            "expected_version": expected_version,
            "rollback": rollback,
            "propose": propose,
        }
        if reason is not None:
            body["reason"] = reason
        path = f"{repo_path(repo)}/aliases/{quote(alias, safe='')}"
        result: JSON = self._json("PUT", path, json_body=body)
        return result

    def dry_run_alias(self, repo: str, alias: str, digest: str, *, rollback: bool = False) -> JSON:
        """POST a dry run of moving ``repo@alias`` to ``digest``: every check of the move,
        each reported (``checks``), and ``allowed``; nothing moves, nothing is proposed."""
        path = f"{repo_path(repo)}/aliases/{quote(alias, safe='')}/dry-run"
        body: JSON = {"digest": digest, "rollback": rollback}
        result: JSON = self._json("POST", path, json_body=body)
        return result

    def alias_history(self, repo: str, alias: str) -> list[JSON]:
        """GET the alias's history [{version, from_digest, to_digest, actor, at, reason...}]."""
        path = f"{repo_path(repo)}/aliases/{quote(alias, safe='')}/history"
        result: list[JSON] = self._json("GET", path)
        return result

    def rollback(
        self,
        repo: str,
        alias: str,
        digest: str | None = None,
        reason: str | None = None,
        *,
        propose: bool = False,
    ) -> JSON:
        """Set the alias back to ``digest`` (default: the digest before the current one);
        ``propose`` as in ``set_alias``."""
        if digest is None:
            current = self.get_alias(repo, alias)
            earlier = [
                h.get("from_digest")
                for h in self.alias_history(repo, alias)
                if h.get("to_digest") == current["digest"] and h.get("from_digest")
            ]
            if not earlier:
                raise ClientConfigError(f"{repo}@{alias} has no earlier digest to roll back to")
            digest = str(earlier[-1])
        return self.set_alias(repo, alias, digest, reason=reason, rollback=True, propose=propose)

    def resolve(self, ref: Reference) -> str:
        """The digest a reference names (aliases resolved through the registry)."""
        if ref.digest is not None:
            return ref.digest
        assert ref.alias is not None  # noqa: S101 - Reference holds one of the two
        return str(self.get_alias(ref.repo, ref.alias)["digest"])

    # -- TUF: signed decisions (docs/tuf.md) -------------------------------------------------
    def tuf_fetcher(self) -> FetcherInterface:
        """python-tuf's transport to this registry's ``/tuf/`` files (token and limits)."""
        from modelward.client.tuf import TufFetcher

        return TufFetcher(self)

    @property
    def tuf_url(self) -> str:
        return self.base_url + "/tuf/"

    def tuf_file(self, name: str) -> bytes:
        """GET /tuf/NAME: one metadata file, byte for byte (unverified)."""
        with self._stream("GET", "/tuf/" + quote(name, safe="")) as response:
            return b"".join(response.iter_raw(64 * 1024))

    def tuf_status(self) -> JSON:
        """GET /v1/tuf/status -> {roles, online_keys, embedded, pending_proposals}."""
        result: JSON = self._json("GET", "/v1/tuf/status")
        return result

    def tuf_proposals(
        self, *, pending: bool = True, repo: str | None = None, alias: str | None = None
    ) -> list[JSON]:
        """GET /v1/tuf/proposals -> the newest proposals (pending ones unless told)."""
        params = {"pending": "true" if pending else "false"}
        params.update({k: v for k, v in (("repository", repo), ("alias", alias)) if v})
        result: list[JSON] = self._json("GET", "/v1/tuf/proposals", params=params)["proposals"]
        return result

    def tuf_proposal(self, proposal_id: int) -> JSON:
        """GET /v1/tuf/proposals/ID -> the proposal with its ``payload`` (base64)."""
        result: JSON = self._json("GET", f"/v1/tuf/proposals/{int(proposal_id)}")
        return result

    def tuf_sign(self, proposal_id: int, keyid: str, signature: str) -> JSON:
        """POST a signature of the proposal's payload -> the proposal (``state``)."""
        body = {"keyid": keyid, "signature": signature}
        result: JSON = self._json(
            "POST", f"/v1/tuf/proposals/{int(proposal_id)}/signatures", json_body=body
        )
        return result

    def tuf_install_root(self, root: bytes) -> JSON:
        """POST /v1/tuf/root: the next root version (admins) -> {version, online_keys}."""
        body = {"root": base64.b64encode(root).decode()}
        result: JSON = self._json("POST", "/v1/tuf/root", json_body=body)
        return result

    def tuf_next_online_keys(self) -> JSON:
        """POST /v1/tuf/online-keys (admins): {role: {keyid, key}} for snapshot and timestamp,
        kept by the registry until a root naming them is installed."""
        result: JSON = self._json("POST", "/v1/tuf/online-keys")
        return result

    def tuf_adopt(self) -> list[JSON]:
        """POST /v1/tuf/adopt (admins): every unsigned alias proposed, one proposal per role."""
        result: list[JSON] = self._json("POST", "/v1/tuf/adopt")["proposals"]
        return result

    def tuf_sync(self) -> JSON:
        """POST /v1/tuf/sync (admins): delegations re-made and due roles re-signed now;
        ``failed``: each step that could not be done."""
        result: JSON = self._json("POST", "/v1/tuf/sync")
        return result

    def tuf_impact(
        self,
        *,
        revoke_key: str | None = None,
        proposal: int | None = None,
        change: str | None = None,
        args: dict[str, str] | None = None,
        refuse_if_lost: bool = False,
    ) -> JSON:
        """POST /v1/tuf/impact: what would be left short of its threshold if ``revoke_key``
        were revoked, top-level targets ``proposal`` published, or ``change`` (a change of
        who may sign: ``set_role``, ``disable_principal``, ``remove_publisher``,
        ``remove_member``, ``set_policy``, ``revoke_key``) made with ``args`` (``lost``);
        ``refuse_if_lost``: the caller will not go ahead then (audited, ``refused``)."""
        body: JSON = {"refuse_if_lost": refuse_if_lost}
        if revoke_key is not None:
            body["revoke_key"] = revoke_key
        if proposal is not None:
            body["proposal"] = proposal
        if change is not None:
            body["change"], body["args"] = change, dict(args or {})
        result: JSON = self._json("POST", "/v1/tuf/impact", json_body=body)
        return result

    def tuf_resign(self, repo: str, alias: str | None = None) -> JSON:
        """POST /v1/tuf/resign: proposals re-signing ``repo``'s roles (``alias``: its role)
        with their signers' newest keys (``proposals``; ``current``: nothing to do)."""
        body: JSON = {"repository": repo}
        if alias is not None:
            body["alias"] = alias
        result: JSON = self._json("POST", "/v1/tuf/resign", json_body=body)
        return result

    # -- audit -----------------------------------------------------------------------------
    def audit(self, after: int | None = None, limit: int | None = None) -> JSON:
        """GET /v1/audit -> {events, next_after}."""
        params = {k: v for k, v in {"after": after, "limit": limit}.items() if v is not None}
        result: JSON = self._json("GET", "/v1/audit", params=params)
        return result

    def iter_audit(self, after: int = 0, page: int = 500) -> Iterator[JSON]:
        """Every audit event after ``after``, page by page."""
        while True:
            answer = self.audit(after=after, limit=page)
            events = answer.get("events") or []
            yield from events
            nxt = answer.get("next_after")
            if not events or nxt is None or int(nxt) <= after:
                return
            after = int(nxt)

    # -- composed operations (client.bundles) ----------------------------------
    push = push_bundle
    unsafe_fetch = unsafe_fetch_bundle

    # -- attestations: retraction and forensics (cli.attestation) ---------------
    def retract_attestation(self, repo: str, digest: str, attestation_id: int, reason: str) -> JSON:
        """DELETE .../attestations/{id} {reason}: retract an attestation (its attacher or an
        admin); it stays recorded and counts nowhere -> its summary with ``retracted_*``."""
        path = f"{repo_path(repo)}/bundles/{digest}/attestations/{int(attestation_id)}"
        result: JSON = self._json("DELETE", path, json_body={"reason": reason})
        return result

    def list_attestations_with_retracted(self, repo: str, digest: str) -> list[JSON]:
        """GET .../attestations?include_retracted=true (admins and reviewers): every
        attestation of a bundle, retracted ones too, each saying ``retracted`` (by, at, reason).
        """
        path = f"{repo_path(repo)}/bundles/{digest}/attestations"
        result: list[JSON] = self._json("GET", path, params={"include_retracted": "true"})
        return result

    # -- approvals: withdrawal (cli.bundles approve --withdraw) --------------------
    def withdraw_approval(self, repo: str, digest: str, alias: str, reason: str) -> JSON:
        """DELETE .../approvals {alias, reason}: the caller withdraws its own approval of
        ``digest`` for ``alias``; it no longer counts -> {digest, alias, approvers, withdrawn}.
        Raises ``ForbiddenError`` (only others approved it), ``ConflictError`` (already withdrawn),
        ``NotFoundError`` (no approval)."""
        path = f"{repo_path(repo)}/bundles/{digest}/approvals"
        result: JSON = self._json("DELETE", path, json_body={"alias": alias, "reason": reason})
        return result

    # -- audit: signed checkpoints and Merkle proofs (client.audit) -------------
    def audit_checkpoint(self) -> JSON:
        """GET /v1/audit/checkpoint -> {checkpoint (the signed note), origin, tree_size,
        root_hash, verifier_key}: unverified; ``attest.audit.checkpoint`` checks it."""
        result: JSON = self._json(
            "GET", "/v1/audit/checkpoint", what="audit checkpoint", max_bytes=256 * 1024
        )
        return result

    def audit_inclusion_proof(self, index: int, size: int) -> JSON:
        """GET /v1/audit/proof/inclusion -> {index, seq, tree_size, leaf_hash, proof}
        (admins and reviewers); unverified."""
        params = {"index": int(index), "size": int(size)}
        result: JSON = self._json("GET", "/v1/audit/proof/inclusion", params=params)
        return result

    def audit_consistency_proof(self, first: int, second: int) -> JSON:
        """GET /v1/audit/proof/consistency -> {from, to, proof}; unverified."""
        params = {"from": int(first), "to": int(second)}
        result: JSON = self._json("GET", "/v1/audit/proof/consistency", params=params)
        return result

    # -- orgs: owners and policy floors (cli.orgs) ---------------------------
    def put_org(
        self,
        org: str,
        *,
        owners: Sequence[str] | None = None,
        floor: JSON | None = None,
        remove_floor: bool = False,
    ) -> JSON:
        """PUT /v1/orgs/{org} (admins): create the org, or update it. ``owners`` replaces the
        owners (None: keep); ``floor`` (``{"aliases": [{pattern, approvals,
        require_baseline?}]}``) replaces the floor, ``remove_floor`` removes it (neither:
        keep) -> {name, owners, floor, repositories, created_at}. Raises ``ConflictError`` when
        repositories of the org would fall below a raised floor (listed in ``detail``)."""
        if floor is not None and remove_floor:
            raise ClientConfigError("give a floor or remove_floor, not both")
        body: JSON = {}
        if owners is not None:
            body["owners"] = list(owners)
        if floor is not None or remove_floor:
            body["floor"] = floor
        result: JSON = self._json("PUT", f"/v1/orgs/{quote(org, safe='')}", json_body=body)
        return result

    def get_org(self, org: str) -> JSON:
        """GET /v1/orgs/{org} -> {name, owners, floor, repositories, created_at}."""
        result: JSON = self._json("GET", f"/v1/orgs/{quote(org, safe='')}")
        return result

    def list_orgs(self) -> list[JSON]:
        """GET /v1/orgs -> every org, by name."""
        result: list[JSON] = self._json("GET", "/v1/orgs")
        return result

    def add_org_owner(self, org: str, principal: str) -> JSON:
        """POST /v1/orgs/{org}/owners {principal} (admins) -> the org."""
        path = f"/v1/orgs/{quote(org, safe='')}/owners"
        result: JSON = self._json("POST", path, json_body={"principal": principal})
        return result

    def org_members(self, org: str) -> JSON:
        """GET /v1/orgs/{org}/members (the org's owners, admins) -> {org, owners, members}."""
        result: JSON = self._json("GET", f"/v1/orgs/{quote(org, safe='')}/members")
        return result

    def add_org_member(self, org: str, principal: str) -> JSON:
        """POST /v1/orgs/{org}/members {principal} -> {org, owners, members}."""
        path = f"/v1/orgs/{quote(org, safe='')}/members"
        result: JSON = self._json("POST", path, json_body={"principal": principal})
        return result

    def remove_org_member(self, org: str, principal: str, *, force: bool = False) -> JSON:
        """DELETE /v1/orgs/{org}/members/{principal} -> {org, owners, members}; ``force``:
        as ``set_policy``."""
        path = f"/v1/orgs/{quote(org, safe='')}/members/{quote(principal, safe='')}"
        result: JSON = self._json("DELETE", path, params=_forced(force))
        return result

    def set_org_private_by_default(self, org: str, *, private: bool) -> JSON:
        """PUT /v1/orgs/{org}/private-by-default {private_by_default} -> the org."""
        path = f"/v1/orgs/{quote(org, safe='')}/private-by-default"
        result: JSON = self._json("PUT", path, json_body={"private_by_default": private})
        return result

    def remove_org_owner(self, org: str, principal: str) -> JSON:
        """DELETE /v1/orgs/{org}/owners/{principal} (admins) -> the org."""
        path = f"/v1/orgs/{quote(org, safe='')}/owners/{quote(principal, safe='')}"
        result: JSON = self._json("DELETE", path)
        return result


def _forced(force: bool) -> dict[str, str] | None:
    """The ``force`` query parameter of a change of who may sign (docs/tuf.md#previews)."""
    return {"force": "true"} if force else None
