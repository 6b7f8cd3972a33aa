"""Issue 28 item 11: a command that has nothing to do succeeds and says so, through the
real CLI against a real ``modelward serve`` (SQLite and PostgreSQL): a retried push with
the same ``--alias`` (what a retried CI job does), ``alias set`` to the current target, and
``trust sign`` of a proposal that changes nothing exit 0, sign nothing and record no move.
"""

from __future__ import annotations

import json
from pathlib import Path

from modelward.attest.keys import save_private_key
from tests.registry.conftest import Registry, make_bundle_dir, new_publisher, push_new


def test_a_retried_push_alias_set_and_trust_sign_that_change_nothing_succeed(
    registry: Registry, tmp_path: Path
) -> None:
    pub = new_publisher(registry)
    repo = registry.repo(pub)
    key = tmp_path / "pub.key"
    save_private_key(pub.key, key)
    token = pub.actor.token
    bundle = make_bundle_dir(tmp_path / "bundle")
    push = ("push", str(bundle), repo, "--sign", "--key", str(key), "--alias", "canary")

    first = registry.cli(*push, "--json", token=token)
    assert first.returncode == 0, first.stderr
    digest = json.loads(first.stdout)["digest"]
    assert json.loads(first.stdout)["alias"]["signed"] is True

    # the retried job: the same bundle, the same alias
    again = registry.cli(*push, "--json", token=token)
    assert again.returncode == 0, again.stdout + again.stderr
    answer = json.loads(again.stdout)
    assert answer["digest"] == digest
    assert answer["alias"]["unchanged"] is True
    assert answer["alias"]["signed"] is True
    assert answer["alias"]["version"] == 1
    text = registry.cli(*push, token=token)
    assert text.returncode == 0, text.stdout + text.stderr
    assert f"{repo}@canary already points to {digest}; nothing to sign" in text.stdout
    assert "error" not in text.stderr

    # alias set to the current target, with and without the key
    for extra in ((), ("--key", str(key))):
        same = registry.cli("alias", "set", f"{repo}@canary", digest, *extra, token=token)
        assert same.returncode == 0, same.stdout + same.stderr
        assert "already points to" in same.stdout
    history = registry.cli("alias", "history", f"{repo}@canary", "--json", token=token)
    assert len(json.loads(history.stdout)) == 1  # no move was recorded again

    # a proposal that changes nothing: beta signed at d1, moved (unsigned) to d2, moved
    # back to d1: the last proposal sets beta to what the role already signs
    d1, d2 = digest, push_new(pub, repo, tmp_path)
    signed = registry.cli("alias", "set", f"{repo}@beta", d1, "--key", str(key), token=token)
    assert signed.returncode == 0, signed.stderr
    for target in (d2, d1):
        moved = registry.cli("alias", "set", f"{repo}@beta", target, "--json", token=token)
        assert moved.returncode == 0, moved.stderr
    proposal = json.loads(moved.stdout)["proposal"]
    assert proposal is not None
    sign = registry.cli("trust", "sign", str(proposal), "--key", str(key), "--json", token=token)
    assert sign.returncode == 0, sign.stdout + sign.stderr
    assert json.loads(sign.stdout)["unchanged"] is True
    assert "changes nothing" in sign.stderr
    assert "error" not in sign.stderr
    assert pub.actor.client.get_alias(repo, "beta")["signed"] is True
