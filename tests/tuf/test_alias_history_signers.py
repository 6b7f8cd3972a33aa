"""Issue 28 item 8: ``alias history`` shows who signed each move (keyids and principals),
in text and ``--json``, read from the signed TUF metadata, through the real CLI against a
real ``modelward serve`` (SQLite and PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

from tests.registry.conftest import Registry, push_new
from tests.tuf.test_signed_flow_cli import Flow


def test_alias_history_names_the_signers_of_each_signed_move(
    registry: Registry, tmp_path: Path
) -> None:
    flow = Flow(registry, tmp_path)
    d1 = push_new(flow.pub, flow.repo, tmp_path)
    d2 = push_new(flow.pub, flow.repo, tmp_path)

    # prod: proposed by the publisher, signed by both reviewers
    flow.as_json(flow.pub, "alias", "set", f"{flow.repo}@prod", d1)
    flow.approve(flow.rev1, d1)
    assert flow.approve(flow.rev2, d1)["state"] == "published"
    # dev: signed by the publisher's key; then moved on the registry's word alone
    key = str(flow.keys[flow.pub.name])
    flow.as_json(flow.pub, "alias", "set", f"{flow.repo}@dev", d1, "--key", key)
    flow.as_json(flow.pub, "alias", "set", f"{flow.repo}@dev", d2)

    prod = flow.as_json(None, "alias", "history", f"{flow.repo}@prod")
    assert isinstance(prod, list)
    assert len(prod) == 1
    signers = prod[0]["signed"]["signers"]
    assert {(s["principal"], s["keyid"]) for s in signers} == {
        (flow.rev1.name, flow.rev1.keyid),
        (flow.rev2.name, flow.rev2.keyid),
    }
    assert prod[0]["signed"]["version"] >= 1

    dev = flow.as_json(None, "alias", "history", f"{flow.repo}@dev")
    assert isinstance(dev, list)
    assert [m["to_digest"] for m in dev] == [d1, d2]
    assert [s["principal"] for s in dev[0]["signed"]["signers"]] == [flow.pub.name]
    assert dev[1]["signed"] is None

    text = flow.cli(None, "alias", "history", f"{flow.repo}@prod")
    assert text.returncode == 0, text.stderr
    assert f"{flow.rev1.name} (key {flow.rev1.keyid[:16]})" in text.stdout
    assert f"{flow.rev2.name} (key {flow.rev2.keyid[:16]})" in text.stdout
    text = flow.cli(None, "alias", "history", f"{flow.repo}@dev")
    assert f"signed by {flow.pub.name} (key {flow.pub.keyid[:16]})" in text.stdout
    assert "unsigned: no signed TUF version names this move" in text.stdout
