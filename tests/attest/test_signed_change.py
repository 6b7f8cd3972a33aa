"""attest.signed_change: what a signer sees is computed from the bytes it signs and the
version it verified (docs/tuf.md#what-a-signer-checks). One test per way a proposal could
hide what it does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tuf.api.metadata import DelegatedRole, Delegations, Metadata, TargetFile, Targets

from modelward.attest.keys import generate_private_key
from modelward.attest.rollout import make_plan
from modelward.attest.signed_change import ProposalRefused, describe_signer_change, proposed_change
from modelward.attest.tuf import tuf_key

NOW = datetime(2026, 12, 7, tzinfo=UTC)
ROLE = "acme:tiny@prod"
PATHS = ["acme/tiny/aliases/prod", "acme/tiny/rollouts/prod"]
D1, D2, D3 = ("sha256:" + c * 64 for c in "123")


def _targets(version: int, **targets: TargetFile) -> Metadata[Targets]:
    return Metadata(Targets(version=version, expires=NOW + timedelta(days=30), targets=targets))


def _top(version: int, threshold: int, keys: list[object], paths: list[str]) -> bytes:
    tuf_keys = [tuf_key(k.public_key()) for k in keys]  # type: ignore[attr-defined]
    role = DelegatedRole(ROLE, [k.keyid for k in tuf_keys], threshold, True, paths)
    md = _targets(version)
    md.signed.delegations = Delegations({k.keyid: k for k in tuf_keys}, roles={ROLE: role})
    return md.to_bytes()


def _delegation(paths: list[str] = PATHS) -> DelegatedRole:
    return DelegatedRole(ROLE, ["k"], 1, True, paths)


def test_a_lowered_threshold_a_new_key_and_wider_paths_are_each_spelled_out() -> None:
    a, b, c = (generate_private_key() for _ in range(3))
    before = _top(4, 2, [a, b], PATHS)
    after = _top(5, 1, [a, b, c], [*PATHS, "acme/tiny/aliases/*"])
    change = proposed_change(after, before, role="targets", delegation=None, now=NOW)
    kinds = [c.kind for c in change.signers]
    assert kinds == ["key added", "threshold lowered", "paths widened"]
    assert all(c.needs_confirmation for c in change.signers)
    assert describe_signer_change(change.signers[1]) == f"role {ROLE}: threshold lowered: 2 -> 1"


def test_a_key_replaced_under_the_same_keyid_is_refused_or_named() -> None:
    a, b = generate_private_key(), generate_private_key()
    before = Metadata[Targets].from_bytes(_top(4, 1, [a], PATHS))
    forged = Metadata[Targets].from_bytes(_top(5, 1, [a], PATHS))
    assert forged.signed.delegations is not None
    assert forged.signed.delegations.keys is not None
    [(keyid, key)] = forged.signed.delegations.keys.items()
    key.keyval["public"] = tuf_key(b.public_key()).keyval["public"]  # b's key under a's id
    with pytest.raises(ProposalRefused, match=f"delegated key {keyid}: .* keyid is not"):
        proposed_change(forged.to_bytes(), before.to_bytes(), role="targets", delegation=None,
                        now=NOW)  # fmt: skip


def test_a_raised_threshold_needs_no_confirmation() -> None:
    a, b = generate_private_key(), generate_private_key()
    change = proposed_change(
        _top(5, 2, [a, b], PATHS), _top(4, 1, [a, b], PATHS), role="targets", delegation=None,
        now=NOW,
    )  # fmt: skip
    assert [(c.kind, c.needs_confirmation) for c in change.signers] == [("threshold raised", False)]


def test_a_replayed_version_is_refused() -> None:
    previous = _targets(3, **{PATHS[0]: TargetFile.from_data(PATHS[0], b"m1")}).to_bytes()
    with pytest.raises(ProposalRefused, match="version 3, not after the version this machine"):
        proposed_change(previous, previous, role=ROLE, delegation=_delegation(), now=NOW)


def test_a_target_outside_the_roles_paths_is_refused() -> None:
    other = "acme/other/aliases/prod"
    payload = _targets(1, **{other: TargetFile.from_data(other, b"m")}).to_bytes()
    with pytest.raises(ProposalRefused, match=f"lists {other}, outside the paths"):
        proposed_change(payload, None, role=ROLE, delegation=_delegation(), now=NOW)


def test_a_delegated_role_that_delegates_further_is_refused() -> None:
    md = _targets(1)
    key = tuf_key(generate_private_key().public_key())
    md.signed.delegations = Delegations(
        {key.keyid: key}, roles={"x": DelegatedRole("x", [key.keyid], 1, True, ["*"])}
    )
    with pytest.raises(ProposalRefused, match="delegates to other keys or roles"):
        proposed_change(md.to_bytes(), None, role=ROLE, delegation=_delegation(), now=NOW)


def test_a_role_the_verified_targets_does_not_delegate_is_refused() -> None:
    with pytest.raises(ProposalRefused, match="not delegated by the top-level targets"):
        proposed_change(_targets(1).to_bytes(), None, role=ROLE, delegation=None, now=NOW)


def test_an_expired_proposal_is_refused() -> None:
    with pytest.raises(ProposalRefused, match="expired"):
        proposed_change(
            _targets(1).to_bytes(), None, role=ROLE, delegation=_delegation(),
            now=NOW + timedelta(days=31),
        )  # fmt: skip


def test_a_plan_is_read_from_its_signed_custom_bytes_and_other_bytes_are_refused() -> None:
    plan = make_plan(
        rollout_id="a" * 32, repository="acme/tiny", alias="prod", stable=D1, candidate=D2
    )
    target = TargetFile.from_data(PATHS[1], plan.raw)
    target.unrecognized_fields["custom"] = {"plan": plan.raw.decode()}
    payload = _targets(2, **{PATHS[1]: target}).to_bytes()
    change = proposed_change(payload, None, role=ROLE, delegation=_delegation(), now=NOW)
    assert change.plans[PATHS[1]].candidate == D2
    assert change.plans[PATHS[1]].steps == (5, 20, 50, 100)
    other = make_plan(
        rollout_id="a" * 32, repository="acme/tiny", alias="prod", stable=D1, candidate=D3
    )
    target.unrecognized_fields["custom"] = {"plan": other.raw.decode()}  # not the hashed bytes
    payload = _targets(2, **{PATHS[1]: target}).to_bytes()
    with pytest.raises(ProposalRefused, match="not the bytes its sha256 names"):
        proposed_change(payload, None, role=ROLE, delegation=_delegation(), now=NOW)


def test_not_targets_metadata_is_refused() -> None:
    with pytest.raises(ProposalRefused, match="is not TUF targets metadata"):
        proposed_change(b"{}", None, role=ROLE, delegation=_delegation(), now=NOW)
