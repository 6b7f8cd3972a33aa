"""The errors of ``attest.rollout``. The tree::

AttestError
└── RolloutError            a rollout plan or step is not acceptable
    ├── PlanInvalid         a plan or analysis document is malformed (names the field)
    └── StepRefused         a signed step does not follow its signed plan (names the
                            check, what the plan says and what the step says)
"""

from __future__ import annotations

from modelward.attest.errors import AttestError

__all__ = ["PlanInvalid", "RolloutError", "StepRefused"]


class RolloutError(AttestError):
    """A rollout plan or step is not acceptable."""


class PlanInvalid(RolloutError):  # noqa: N818 - the name is the finding
    """A plan or analysis document is malformed; ``field`` names what is at fault."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"rollout plan: {field}: {why}")
        self.field, self.why = field, why


class StepRefused(RolloutError):  # noqa: N818 - the name is the finding
    """A signed rollout step does not follow its signed plan: ``check`` is the check that
    failed, ``expected`` what the plan (or the worker's memory) allows, ``actual`` what the
    step says."""

    def __init__(self, check: str, expected: object, actual: object) -> None:
        super().__init__(
            f"rollout step refused ({check}): the signed plan allows {expected!r}, "
            f"the step says {actual!r}"
        )
        self.check, self.expected, self.actual = check, expected, actual
