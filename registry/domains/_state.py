"""What every request handler reaches through ``request.app.state.registry``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request

from modelward.registry.db import Database
from modelward.registry.domains._report_queue import ReportIngest
from modelward.registry.domains._throttle import DenialThrottle
from modelward.registry.domains._token_cache import TokenCache
from modelward.registry.domains._verdict_cache import DryRunAudit, VerdictCache
from modelward.registry.domains.signing.tuf.served import MetadataFiles
from modelward.registry.domains.signing.tuf.view import SignedView
from modelward.registry.settings import Settings
from modelward.registry.storage import BlobStore

__all__ = ["AppState", "State", "dumps", "iso"]


@dataclass
class AppState:
    settings: Settings
    db: Database
    store: BlobStore
    default_policy_yaml: str | None
    default_policy_dir: Path | None = None  # files the operator's --policy names are relative to
    denial_throttle: DenialThrottle = field(default_factory=lambda: DenialThrottle(60))
    verdicts: VerdictCache = field(default_factory=VerdictCache)  # bundle evidence, per process
    dry_runs: DryRunAudit = field(default_factory=DryRunAudit)  # which dry runs are audited
    signed: SignedView = field(default_factory=SignedView)  # the signed state, verified
    reports: ReportIngest = field(default_factory=ReportIngest)  # fleet reports' group commit
    # /tuf/ from memory (docs/tuf.md#serving): the files, and the tokens that authenticated
    # within settings.tuf_token_cache_seconds (keyed by their hash)
    tuf_files: MetadataFiles = field(init=False)
    tuf_tokens: TokenCache[Any] = field(init=False)

    def __post_init__(self) -> None:
        self.tuf_files = MetadataFiles(self.db, freshness=self.settings.tuf_freshness_seconds)
        self.tuf_tokens = TokenCache(self.settings.tuf_token_cache_seconds)


def get_state(request: Request) -> AppState:
    state: AppState = request.app.state.registry
    return state


State = Annotated[AppState, Depends(get_state)]


def iso(value: datetime | None) -> str | None:
    """RFC 3339 UTC; SQLite hands back naive datetimes, which are UTC here."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
