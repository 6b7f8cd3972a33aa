"""What the loader needs from a registry: the ``RegistrySource`` seam (docs/loader.md#pull).

The loader trusts none of these answers: it checks the manifest bytes against the digest,
every blob against its digest and size, and every attestation against the WORKER's trust set
(``loader.pull``). ``client.api.RegistryClient`` satisfies this protocol structurally;
a test double only has to provide these methods.

Every method raises ``client.api.RegistryClientError`` subclasses on failure:
``TransportError`` (no answer), ``APIError`` (``NotFoundError``, ``UnauthorizedError``...:
the registry refused), ``BlobIntegrityError`` / ``ResponseTooLarge`` (the registry sent
bytes that are not what was asked for, or too many of them).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tuf.ngclient import FetcherInterface

    from modelward.client.api import RegistryClient
    from modelward.client.config import Reference

__all__ = ["RegistrySource"]


class RegistrySource(Protocol):
    """The registry calls the loader makes (pull, verify, boot, replay, baseline)."""

    base_url: str

    @property
    def tuf_url(self) -> str:
        """Where the registry's TUF metadata files are (``BASE/tuf/``)."""
        ...

    def tuf_fetcher(self) -> FetcherInterface:
        """python-tuf's transport to those files (the worker's token, the client's limits)."""
        ...

    def check_repository(self, name: str) -> None:
        """Raise ``UnknownRepository`` (with close names) when the registry has no repository
        ``name`` the worker may read: checked before an alias is blamed on TUF."""
        ...

    def resolve(self, ref: Reference) -> str:
        """The ``sha256:<hex>`` digest ``ref`` names by the registry's word (used only with
        ``--unsigned-aliases``: aliases are resolved through TUF, ``loader.tuf_resolve``).

        Raises ``NotFoundError`` (no such alias or repository), ``APIError``, ``TransportError``.
        """
        ...

    def get_bundle(self, repo: str, digest: str) -> dict[str, Any]:
        """The registry's record of ``repo@digest``: ``{"digest", "manifest" (base64),
        "quarantined", "quarantine_reason", "tombstoned", ...}``.

        Raises ``NotFoundError``, ``APIError``, ``TransportError``, ``ResponseTooLarge``.
        """
        ...

    def get_manifest(self, repo: str, digest: str, *, max_bytes: int) -> bytes:
        """The exact manifest bytes of ``repo@digest``, read at most ``max_bytes`` of them.

        Raises ``ResponseTooLarge`` as soon as more than ``max_bytes`` arrive,
        ``BlobIntegrityError`` when the bytes do not hash to ``digest``, ``NotFoundError``,
        ``APIError``, ``TransportError``.
        """
        ...

    def list_attestations(self, repo: str, digest: str) -> list[dict[str, Any]]:
        """Every attestation stored for ``repo@digest``: ``[{"id", "kind", "predicate_type",
        "data" (base64 of the raw envelope)}]``, unverified.

        Raises ``NotFoundError``, ``APIError``, ``TransportError``, ``ResponseTooLarge``.
        """
        ...

    def download_blob(
        self,
        digest: str,
        dest: Path,
        *,
        size: int,
        progress: Callable[[int], None] | None = None,
    ) -> Path:
        """Stream blob ``digest`` of ``size`` bytes (as the manifest states) into ``dest``;
        returns ``dest``, which appears only once its size and digest check passed.

        Never writes more than ``size`` bytes. Raises ``BlobIntegrityError`` (more, fewer or
        other bytes than stated; nothing kept), ``NotFoundError``, ``APIError``,
        ``TransportError``.
        """
        ...

    def add_attestation(self, repo: str, digest: str, data: bytes) -> dict[str, Any]:
        """Store a signed envelope (raw bytes) for ``repo@digest``; returns the registry's
        ``{"id", "kind", "predicate_type"}``.

        Raises ``BadRequestError`` (refused envelope), ``ForbiddenError``, ``APIError``,
        ``TransportError``.
        """
        ...

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
        """Record a serving worker's boot of ``repo@digest`` (``outcome``: ok, serving,
        refused); returns the registry's answer.

        Raises ``APIError``, ``TransportError``.
        """
        ...

    def audit_checkpoint(self) -> dict[str, Any]:
        """The registry's current signed checkpoint of its audit log: ``{"checkpoint" (the
        C2SP signed note), ...}``, unverified (``modelward.client.audit.witness_checkpoint``
        checks it against the worker's pinned key).

        Raises ``APIError``, ``TransportError``, ``ResponseTooLarge``.
        """
        ...


if TYPE_CHECKING:

    def _registry_client_is_a_source(client: RegistryClient) -> RegistrySource:
        """mypy checks here that ``RegistryClient`` satisfies ``RegistrySource``."""
        return client
