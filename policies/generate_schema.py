"""Regenerate policies/schema.json from the pydantic models in attest.policy.

Run ``.venv/bin/python -m modelward.policies.generate_schema`` after changing the policy models;
tests/attest/test_policy.py fails while the committed schema differs from the generated one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from modelward.attest.policy import policy_json_schema_text

SCHEMA_PATH = Path(__file__).resolve().parent / "schema.json"


def main() -> None:
    SCHEMA_PATH.write_text(policy_json_schema_text(), encoding="utf-8")
    sys.stdout.write(f"wrote {SCHEMA_PATH}\n")


if __name__ == "__main__":
    main()
