"""Issue 28 item 1: rotating a reviewer's key does not silently break an alias, through the
real CLI against a real ``modelward serve``:

- a rotation (register the new key, re-sign with ``trust resign``, revoke the old key)
  keeps ``prod`` resolvable by a pinned worker after every step (SQLite and PostgreSQL);
- ``key revoke`` of a key whose signatures ``prod`` still needs shows
  ``prod: 1 of 2 signatures would remain; workers will refuse it`` and, without ``--force``
  (or its older name ``--yes``), revokes nothing and exits 1 (audited as
  ``tuf.unsigning.refused``);
- with the targets key offline, ``trust sign`` of the delegation change a revocation
  proposes previews the same and refuses without ``--yes``; ``trust adopt`` then names the
  aliases it adopts.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from modelward.attest.keys import generate_private_key, save_private_key
from tests.registry.conftest import Publisher, Registry, push_new
from tests.tuf.test_signed_flow_cli import Flow


def _ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _released(flow: Flow, tmp: Path) -> str:
    """prod published at a new bundle, signed by both reviewers; the worker pins the root."""
    digest = push_new(flow.pub, flow.repo, tmp)
    _ok(flow.cli(None, "trust", "root", "--out", str(flow.root)))
    flow.as_json(flow.pub, "alias", "set", f"{flow.repo}@prod", digest)
    flow.approve(flow.rev1, digest)
    assert flow.approve(flow.rev2, digest)["state"] == "published"
    return digest


def _new_key(flow: Flow, who: Publisher, tmp: Path) -> Path:
    path = tmp / f"{who.name}-new.key"
    save_private_key(generate_private_key(), path)
    _ok(flow.cli(who, "key", "register", str(path) + ".pub"))
    return path


def _refused_events(reg: Registry) -> list[dict[str, object]]:
    return [e for e in reg.admin.iter_audit() if e["action"] == "tuf.unsigning.refused"]


def test_a_key_rotation_keeps_prod_resolvable_after_every_step(
    registry: Registry, tmp_path: Path
) -> None:
    flow = Flow(registry, tmp_path)
    digest = _released(flow, tmp_path)

    def resolves(step: str) -> None:
        pulled = flow.pull("prod")  # one worker, its cache kept: it follows every change
        assert pulled.returncode == 0, f"{step}: {pulled.stderr}"
        assert digest in pulled.stdout, step

    resolves("published")
    # (1) rev1 registers her new key: prod keeps naming the old one until re-signed
    new_key = _new_key(flow, flow.rev1, tmp_path)
    _ok(registry.cli("trust", "sync"))
    resolves("new key registered")

    # revoking the old key now would unsign prod: refused without --force, and audited
    before = len(_refused_events(registry))
    refused = flow.cli(flow.rev1, "key", "revoke", flow.rev1.keyid)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert (
        f"{flow.repo}@prod: 1 of 2 signatures would remain; workers will refuse it"
        in refused.stderr
    )
    assert "--force" in refused.stderr
    assert "was not revoked" in refused.stderr
    as_json = flow.cli(flow.rev1, "key", "revoke", flow.rev1.keyid, "--json")
    assert as_json.returncode == 1
    answer = json.loads(as_json.stdout)
    assert answer["revoked"] is False
    assert [x["target"] for x in answer["signatures_lost"]] == [f"{flow.repo}@prod"]
    assert len(_refused_events(registry)) == before + 2
    resolves("revocation refused")

    # (2) both reviewers re-sign prod's targets as they are, rev1 with her new key
    half = _ok(flow.cli(flow.rev1, "trust", "resign", flow.repo, "--key", str(new_key)))
    assert "signed: #" in half.stdout, half.stdout
    resolves("re-signed by one of two")
    done = _ok(
        flow.cli(
            flow.rev2,
            "trust",
            "resign",
            f"{flow.repo}@prod",
            "--key",
            str(flow.keys[flow.rev2.name]),
        )
    )
    assert "published: #" in done.stdout, done.stdout
    resolves("re-signed")
    again = _ok(flow.cli(flow.rev1, "trust", "resign", flow.repo, "--key", str(new_key)))
    assert "nothing to re-sign" in again.stdout  # nothing to do is a success

    # (3) the old key goes: nothing loses its signatures, so no --force is needed
    revoked = _ok(flow.cli(flow.rev1, "key", "revoke", flow.rev1.keyid))
    assert "would unsign" not in revoked.stderr
    _ok(registry.cli("trust", "sync"))
    resolves("old key revoked")
    state = flow.as_json(None, "alias", "get", f"{flow.repo}@prod")
    assert (state["digest"], state["signed"]) == (digest, True)


def test_a_publisher_signs_with_her_new_key_and_the_move_re_signs_her_role(
    registry: Registry, tmp_path: Path
) -> None:
    flow = Flow(registry, tmp_path)
    first = push_new(flow.pub, flow.repo, tmp_path)
    _ok(flow.cli(None, "trust", "root", "--out", str(flow.root)))
    old = str(flow.keys[flow.pub.name])
    _ok(flow.cli(flow.pub, "alias", "set", f"{flow.repo}@dev", first, "--key", old))
    new_key = _new_key(flow, flow.pub, tmp_path)
    _ok(registry.cli("trust", "sync"))
    assert first in _ok(flow.pull("dev")).stdout  # her role still names the old key
    second = push_new(flow.pub, flow.repo, tmp_path)
    moved = flow.as_json(
        flow.pub, "alias", "set", f"{flow.repo}@dev", second, "--key", str(new_key)
    )
    assert moved["signed"] is True
    assert second in _ok(flow.pull("dev")).stdout


@pytest.mark.sqlite_only
def test_offline_targets_sign_previews_what_it_unsigns_and_adopt_names_aliases(
    fresh_registry: Registry, tmp_path: Path
) -> None:
    reg = fresh_registry
    flow = Flow(reg, tmp_path)
    root_key, targets_key = tmp_path / "root.key", tmp_path / "targets.key"
    for path in (root_key, targets_key):
        save_private_key(generate_private_key(), path)
    init = ("trust", "init", "--root-key", str(root_key), "--targets-key", str(targets_key))
    _ok(reg.cli(*init, "--accept-signer-changes"))  # the repository's roles are new to it
    pending = [p for p in reg.admin.tuf_proposals() if p["role"] == "targets"]
    for proposal in pending:  # the new repository's delegations
        sign_it = ("trust", "sign", str(proposal["id"]), "--key", str(targets_key), "--yes")
        _ok(reg.cli(*sign_it, "--accept-signer-changes"))
    digest = _released(flow, tmp_path)
    assert digest in _ok(flow.pull("prod")).stdout

    # the revocation is previewed and needs --force (--yes, its older name, still works); it
    # proposes the delegations without it
    refused = flow.cli(flow.rev1, "key", "revoke", flow.rev1.keyid)
    assert refused.returncode == 1
    assert f"{flow.repo}@prod: 1 of 2 signatures would remain" in refused.stderr
    _ok(flow.cli(flow.rev1, "key", "revoke", flow.rev1.keyid, "--yes"))
    change = next(p for p in reg.admin.tuf_proposals() if p["role"] == "targets")
    sign = (
        "trust", "sign", str(change["id"]), "--key", str(targets_key), "--accept-signer-changes"
    )  # fmt: skip
    unsigned = reg.cli(*sign)
    assert unsigned.returncode == 1, unsigned.stdout + unsigned.stderr
    line = f"{flow.repo}@prod: 1 of 2 signatures would remain; workers will refuse it"
    assert line in unsigned.stderr
    assert "was not signed" in unsigned.stderr
    assert "--yes" in unsigned.stderr
    assert any(e["subject"] == f"sign proposal {change['id']}" for e in _refused_events(reg))
    as_json = reg.cli(*sign, "--json")
    assert as_json.returncode == 1
    lost = json.loads(as_json.stdout)["signatures_lost"]
    assert [x["target"] for x in lost] == [f"{flow.repo}@prod"]
    assert digest in _ok(flow.pull("prod")).stdout  # nothing was signed
    signed = _ok(reg.cli(*sign, "--yes"))
    assert f"warning: {line}" in signed.stderr

    # prod is unsigned now, as the admin chose; adopt names the alias it proposes again
    adopted = _ok(reg.cli("trust", "adopt"))
    assert f"{flow.repo}@prod -> {digest}" in adopted.stdout, adopted.stdout
    assert "(unset) -> None" not in adopted.stdout
