"""Release records: one signed document per promotion, and its offline verifier
(docs/release.md).

A release record is a DSSE envelope (attest.dsse) around an in-toto statement
(attest.statement) whose subject is the bundle an alias named at one version of its
history, predicate type ``https://modelward.dev/release-record/v1``. The predicate carries,
byte for byte, what decided that release: the bundle manifest and config,
``modelward.yaml``, the policy text, the evaluation, baseline and replay envelopes, the TUF
metadata that signs the alias (root chain, top-level targets, the alias's role), the alias
history of the promotion and the audit events around it.

- ``build_predicate`` assembles it from bytes the caller fetched, computing every digest it
  states; ``make_record_statement`` and ``write_record`` make the signed file (``_build``).
- ``signed_moves`` is the alias's history as its TUF role versions make it, the only history
  a record claims (``_moves``); the registry's alias-history rows are unsigned context.
- ``signed_plans`` and ``signed_steps`` are the release's rollouts as the alias's role and
  ``ORG:NAME@=rollout`` sign them (``_rollouts``): the plans of the alias signed between the
  previous move and this one, and each one's steps; ``later_plans`` the rollouts run from
  this release's digest since (a canary aborted after the last move); the verdicts the
  signed steps acted on (``_verdicts``); the registry's times, holds and rollback figures
  are unsigned context.
- ``verify_record`` is the one decision about a record file, offline, in six checks in the
  order of the spec: file, tuf, signature, envelopes, digests, rollouts (``_verify``,
  ``_digests``, ``_rollouts``);
  ``verify_record_key`` applies its signer rule before a record is signed.
- ``render_markdown`` (``_render``) and ``render_html`` (``_page``: the template in
  ``TEMPLATES_DIR`` the console includes too, and its ``shown`` filter) are readable
  renderings, ``rollout_lines`` their rollouts section.

Errors (the tree of attest.errors, one branch added)::

    VerificationError
    └── ReleaseRecordInvalid   check (1-6 and its name), field, message

    ValueError (the caller's input, not a finding about a record)
    ├── PinnedRootError        the --trust-root given is not a self-signed TUF root
    └── RecordKeyRefused       keyid, role: a key verify_record would not trust to sign

Pure: no network, no database, no environment.
"""

from __future__ import annotations

from modelward.attest.release._build import (
    build_predicate,
    classify_files,
    gate_decisions,
    make_record_statement,
    write_record,
)
from modelward.attest.release._model import (
    CHECKS,
    PREDICATE_TYPE,
    PinnedRootError,
    RecordKeyRefused,
    RecordLimits,
    ReleaseRecordInvalid,
    VerifiedRecord,
)
from modelward.attest.release._moves import signed_moves
from modelward.attest.release._page import TEMPLATES_DIR, render_html, shown
from modelward.attest.release._render import render_markdown, rollout_lines
from modelward.attest.release._rollouts import SignedPlan, later_plans, signed_plans, signed_steps
from modelward.attest.release._verify import verify_record, verify_record_key

__all__ = [
    "CHECKS",
    "PREDICATE_TYPE",
    "TEMPLATES_DIR",
    "PinnedRootError",
    "RecordKeyRefused",
    "RecordLimits",
    "ReleaseRecordInvalid",
    "SignedPlan",
    "VerifiedRecord",
    "build_predicate",
    "classify_files",
    "gate_decisions",
    "later_plans",
    "make_record_statement",
    "render_html",
    "render_markdown",
    "rollout_lines",
    "shown",
    "signed_moves",
    "signed_plans",
    "signed_steps",
    "verify_record",
    "verify_record_key",
    "write_record",
]
