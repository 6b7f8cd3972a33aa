"""The queries that read attestations, so that "retracted" is decided in one place.

Every place that judges a bundle (push, alias moves, the default listing a loader reads)
selects its attestations through ``live_attestations``: a retracted attestation keeps its row
and bytes for forensics and counts nowhere.
"""

from __future__ import annotations

from sqlalchemy import Select, select

from modelward.registry.models import Attestation, Bundle

__all__ = ["all_attestations", "attestation_in_bundle", "live_attestations"]


def live_attestations(bundle_id: int) -> Select[Attestation]:
    """The bundle's attestations that count (not retracted), oldest first.

    For a column (``select(Attestation.sha256)``) add ``.where(Attestation.is_live())`` instead.
    """
    return all_attestations(bundle_id).where(Attestation.is_live())


def all_attestations(bundle_id: int) -> Select[Attestation]:
    """Every attestation of the bundle, retracted ones too (forensics), oldest first."""
    return select(Attestation).where(Attestation.bundle_id == bundle_id).order_by(Attestation.id)


def attestation_in_bundle(bundle: Bundle, attestation_id: int) -> Select[Attestation]:
    """Attestation ``attestation_id`` if it is attached to ``bundle`` (else no row)."""
    return select(Attestation).where(
        Attestation.id == attestation_id, Attestation.bundle_id == bundle.id
    )
