"""Publishing: re-signing snapshot and timestamp and keeping the delegations in line with the
database (``refresh``, ``sync``; docs/tuf.md#serving)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState
from modelward.registry.domains.signing.online import repository, trust_of
from modelward.registry.domains.signing.tuf.bootstrap import (
    refresh_health,
    sync_delegations,
)
from modelward.registry.domains.signing.tuf.keys import (
    TufKeyUnavailable,
)
from modelward.registry.domains.signing.tuf.repository import (
    MetadataRepository,
    MetadataRowRefused,
)
from modelward.registry.domains.signing.tuf.tables import TufProposal
from modelward.registry.errors import RegistryError
from modelward.registry.kit.logs import log_failure

log = logging.getLogger("modelward.registry")


@dataclass(frozen=True)
class NotRefreshed:
    """One step of a refresh that failed: ``step`` (``delegations``: re-making top-level
    targets from the database; ``snapshot and timestamp``: re-signing them), the error's
    ``code`` and message and, for a stored row the registry refuses, its ``role`` and
    ``version``."""

    step: str
    code: str
    message: str
    role: str | None = None
    version: int | None = None

    @classmethod
    def of(cls, step: str, exc: BaseException) -> NotRefreshed:
        if isinstance(exc, MetadataRowRefused):
            return cls(step, exc.code, exc.message, exc.role, exc.version)
        code = exc.code if isinstance(exc, RegistryError) else type(exc).__name__
        return cls(step, code, str(exc)[:500])

    def as_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "code": self.code,
            "message": self.message,
            "role": self.role,
            "version": self.version,
        }


@dataclass(frozen=True)
class Refreshed:
    """What ``refresh`` did: whether anything new was signed or proposed, and every step
    it could not do (``failed``; empty when all went well)."""

    changed: bool
    failed: tuple[NotRefreshed, ...] = ()


class _Abandoned(Exception):  # noqa: N818 - control flow: roll the refresh back
    """Raised inside the refresh's transaction so that nothing of a failed one is kept."""


def refresh(state: AppState) -> Refreshed:
    """Re-sign snapshot and timestamp past half-life (and over a newer stored row that does
    not verify), and bring the delegations in line with the database. Every step that
    fails is reported (``Refreshed.failed``: which step, why, the stored row at fault),
    logged (``tuf_refresh_failed``), counted (``modelward_tuf_refresh_failures_total``) and
    shown by ``trust status``; a failed re-signing keeps nothing of this refresh. Raises
    TufKeyUnavailable (503) when this replica holds no online keys."""
    failed: list[NotRefreshed] = []
    changed = False
    try:
        with state.db.write() as session:
            repo = repository(session, state)
            synced = sync(session, state, repo, proposer_id=None, failed=failed)
            try:
                changed = repo.refresh() or synced is not False
            except (TufKeyUnavailable, IntegrityError):
                raise
            except Exception as exc:  # any other failure: reported, nothing kept
                failed.append(NotRefreshed.of("snapshot and timestamp", exc))
                log_failure(log, "tuf_refresh_failed", exc)
                raise _Abandoned from exc
    except _Abandoned as abandoned:
        changed = False
        refresh_health(error=abandoned.__cause__, record=True)
        return Refreshed(changed, tuple(failed))
    except IntegrityError:  # another replica signed the same versions first
        refresh_health(record=True)
        return Refreshed(False, tuple(failed))
    except Exception as exc:
        refresh_health(error=exc, record=True)
        log_failure(log, "tuf_refresh_failed", exc)
        raise
    refresh_health(record=True)  # snapshot and timestamp: re-signed as due
    return Refreshed(changed, tuple(failed))


def sync(
    session: Session,
    state: AppState,
    repo: MetadataRepository,
    *,
    proposer_id: int | None,
    failed: list[NotRefreshed] | None = None,
) -> bool | TufProposal:
    """``sync_delegations``; a failure leaves the delegations as they are (a proposal is
    then checked against the published ones, never against none): it is logged
    (``tuf_sync_failed``) and, when ``failed`` is given, added to it for the caller to
    report (``refresh``, ``POST /v1/tuf/sync``)."""
    try:
        return sync_delegations(
            session,
            repo,
            trust_of(state.settings).keys,
            state.default_policy_yaml,
            proposer_id=proposer_id,
        )
    except Exception as exc:  # noqa: BLE001 - any failure: keep the published delegations
        log_failure(log, "tuf_sync_failed", exc)
        if failed is not None:
            failed.append(NotRefreshed.of("delegations", exc))
        return False
