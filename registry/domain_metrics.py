"""The registry's domain gauges on ``/metrics``, computed at scrape time (docs/registry.md#metrics).

Each scrape reads them in one read transaction, with bounded queries:

1. ``modelward_tuf_expiry_seconds{role}``: seconds until the latest version of each TUF role
   expires (negative once expired), for at most ``MAX_ROLES`` roles by name; a private
   repository's roles (``ORG:NAME@…``) only for a caller who may read it;
2. ``modelward_tuf_pending_proposals``: TUF proposals waiting for signatures (one count);
3. ``modelward_quarantined_digests``: digests quarantined (one count);
4. ``modelward_storage_bytes{repository}``: the bytes each repository is charged, as its
   quota counts them (``gc.quota.usage``), for at most ``MAX_REPOSITORIES`` repositories by
   name, only those the caller may read (``repos.listing.readable_repos``);
5. ``modelward_gc_reclaimed_bytes_total``: bytes garbage collection deleted (blob, upload
   and stray bytes), every run: the total the latest ``storage.gc`` audit event records
   (``gc.service.reclaimed_total``). Read from the database, so every ``serve`` process and
   replica answers the same total, and a restart does not reset it.
6. ``modelward_tuf_refresh_failures_total`` and ``modelward_tuf_refresh_failing``: how this
   process's re-signing of snapshot and timestamp went (``registry.domains.signing.tuf.bootstrap.
   refresh_health``): failures since it started, and 1 while the last attempt failed (also
   logged as ``tuf_refresh_failed`` and shown by ``trust status``).
7. ``modelward_unsigned_aliases{repository}``: aliases the registry moved on its word alone
   (no signed TUF target names the digest the alias points at: ``signing.tuf.view.
   SignedView.aliases``, as ``alias list`` shows ``UNSIGNED``), per repository that has aliases,
   for at most ``MAX_REPOSITORIES`` repositories by name the caller may read: what workers
   resolving through TUF do not see (an OCI tag pushed without a signature, docs/oci.md#
   unsigned-tags).

They name repositories and say what is quarantined, so they are only for an authenticated
caller, even when ``metrics_public`` opens the HTTP metrics to anyone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from modelward.registry.domains._state import AppState
from modelward.registry.domains.auth.service import Caller
from modelward.registry.domains.gc.quota import usage
from modelward.registry.domains.gc.service import reclaimed_total
from modelward.registry.domains.repos.listing import readable_repos
from modelward.registry.domains.signing.proposals import pending_count
from modelward.registry.domains.signing.role_access import repository_of_role
from modelward.registry.domains.signing.tuf.bootstrap import refresh_health
from modelward.registry.domains.signing.tuf.store import SessionStore
from modelward.registry.models import Alias, QuarantinedDigest, Repository

__all__ = ["MAX_REPOSITORIES", "MAX_ROLES", "domain_metrics"]

MAX_ROLES = 1000
MAX_REPOSITORIES = 1000


def domain_metrics(state: AppState, caller: Caller, now: datetime | None = None) -> bytes:
    """The domain gauges in Prometheus text format, as ``caller`` may see them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Domain(state, caller, now))
    return generate_latest(registry)


class _Domain(Collector):
    def __init__(self, state: AppState, caller: Caller, now: datetime | None) -> None:
        self.state = state
        self.caller = caller
        self.now = now

    def collect(self) -> Iterator[Metric]:
        now = self.now or datetime.now(UTC)
        with self.state.db.read() as session:
            yield _tuf_expiry(session, now, self.caller)  # (1)
            yield GaugeMetricFamily(  # (2)
                "modelward_tuf_pending_proposals",
                "TUF proposals waiting for signatures",
                value=pending_count(session),
            )
            yield GaugeMetricFamily(  # (3)
                "modelward_quarantined_digests",
                "Bundle digests quarantined",
                value=_count(session, select(QuarantinedDigest)),
            )
            yield self._storage(session, now)  # (4)
            yield _gc_reclaimed(session)  # (5)
            yield self._unsigned(session)  # (7)
        health = refresh_health()  # (6)
        yield CounterMetricFamily(
            "modelward_tuf_refresh_failures",
            "Failed re-signings of TUF snapshot and timestamp by this process",
            value=health.failures,
        )
        yield GaugeMetricFamily(
            "modelward_tuf_refresh_failing",
            "1 while this process's last re-signing of TUF snapshot and timestamp failed",
            value=1 if health.failing else 0,
        )

    def _storage(self, session: Session, now: datetime) -> Metric:
        family = GaugeMetricFamily(
            "modelward_storage_bytes",
            "Bytes charged to each repository (as its quota counts them)",
            labels=["repository"],
        )
        repos = session.scalars(
            readable_repos(self.caller).order_by("name").limit(MAX_REPOSITORIES)
        )
        for repo in repos:
            family.add_metric([repo.name], usage(session, repo.id, self.state.settings, now))
        return family

    def _unsigned(self, session: Session) -> Metric:
        family = GaugeMetricFamily(
            "modelward_unsigned_aliases",
            "Aliases of each repository that no signed TUF target names (the registry's word "
            "only: workers resolving through TUF do not see them)",
            labels=["repository"],
        )
        readable = readable_repos(self.caller).subquery()
        rows = session.execute(
            select(readable.c.name, Alias.name, Alias.digest)
            .join(Alias, Alias.repo_id == readable.c.id)
            .where(
                readable.c.name.in_(
                    select(readable.c.name)
                    .join(Alias, Alias.repo_id == readable.c.id)
                    .distinct()
                    .order_by(readable.c.name)
                    .limit(MAX_REPOSITORIES)
                )
            )
        ).tuples()
        aliases: dict[str, dict[str, str]] = {}
        for repo, alias, digest in rows:
            aliases.setdefault(repo, {})[alias] = digest
        for repo in sorted(aliases):
            signed = self.state.signed.aliases(session, repo)
            unsigned = sum(1 for a, d in aliases[repo].items() if signed.get(a) != d)
            family.add_metric([repo], unsigned)
        return family


def _count(session: Session, query: Any) -> int:
    return int(session.scalar(select(func.count()).select_from(query.subquery())) or 0)


def _tuf_expiry(session: Session, now: datetime, caller: Caller) -> Metric:
    family = GaugeMetricFamily(
        "modelward_tuf_expiry_seconds",
        "Seconds until the latest version of each TUF role expires (negative: expired)",
        labels=["role"],
    )
    rows = SessionStore(session).newest_rows(MAX_ROLES)
    named = {r for r in (repository_of_role(role) for role, _ in rows) if r is not None}
    readable = set(
        session.scalars(
            readable_repos(caller)
            .with_only_columns(Repository.name)
            .where(Repository.name.in_(named))
        )
    )
    for role, data in rows:
        repo = repository_of_role(role)
        if repo is not None and repo not in readable:
            continue  # a private repository's role, to a caller who may not read it
        expires = _expires(bytes(data))
        if expires is not None:
            family.add_metric([role], (expires - now).total_seconds())
    return family


def _expires(data: bytes) -> datetime | None:
    """The ``signed.expires`` of metadata the registry wrote and verified when it kept it."""
    try:
        text = json.loads(data)["signed"]["expires"]
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except (ValueError, KeyError, TypeError):
        return None


def _gc_reclaimed(session: Session) -> Metric:
    family = CounterMetricFamily(
        "modelward_gc_reclaimed_bytes", "Bytes garbage collection deleted, every run"
    )
    family.add_metric([], reclaimed_total(session))
    return family
