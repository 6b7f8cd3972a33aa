"""The signing domain's tables: TUF metadata and proposals (docs/tuf.md).

Only the signing domain reads and writes them (pyproject.toml's import contracts); every
other module reads signed state through ``signing.tuf.view`` and the domain's functions.
They live on ``registry.models.Base``, so migrations see one schema.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, ForeignKey, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, Session, mapped_column

from modelward.registry.kit.utc import UtcDateTime
from modelward.registry.models import DIGEST, Base, utcnow

__all__ = ["MAX_PROPOSAL_ID", "TufMetadata", "TufProposal", "proposal_row"]

MAX_PROPOSAL_ID = 2**31 - 1  # tuf_proposals.id is a 32-bit INTEGER on PostgreSQL


class TufMetadata(Base):
    """One version of one TUF role's signed metadata, the exact bytes (docs/tuf.md)."""

    __tablename__ = "tuf_metadata"
    role: Mapped[str] = mapped_column(String(300), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)


class TufProposal(Base):
    """The next version of a delegated TUF role, waiting for its signers (docs/tuf.md).

    ``payload`` is that version unsigned, byte for byte as the signers sign it;
    ``signatures`` the JSON list of ``{keyid, sig}`` collected so far (each checked when it
    arrived). ``state``: ``pending``, ``published``, ``stale`` (the role moved on first) or
    ``withdrawn``. ``target``/``from_digest``/``to_digest`` say what changes, for display."""

    __tablename__ = "tuf_proposals"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    role: Mapped[str] = mapped_column(String(300), index=True)
    version: Mapped[int] = mapped_column(BigInteger)
    payload: Mapped[bytes] = mapped_column(LargeBinary)
    signatures: Mapped[str] = mapped_column(Text, default="[]")
    target: Mapped[str] = mapped_column(String(600))
    from_digest: Mapped[str | None] = mapped_column(String(DIGEST), nullable=True)
    to_digest: Mapped[str | None] = mapped_column(String(DIGEST), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    state: Mapped[str] = mapped_column(String(20), default="pending")
    created_by: Mapped[int] = mapped_column(ForeignKey("principals.id"))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


def proposal_row(session: Session, proposal_id: int) -> TufProposal | None:
    """Proposal ``proposal_id``, or None. An id the column cannot hold names no proposal, on
    either database: PostgreSQL would refuse to compare it (400), SQLite finds nothing."""
    if not 1 <= proposal_id <= MAX_PROPOSAL_ID:
        return None
    return session.get(TufProposal, proposal_id)
