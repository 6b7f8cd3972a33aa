"""attest/'s command groups: ``modelward bundle ...`` and ``modelward key ...``.

Each command lives in its own module and registers itself on the groups in ``_apps``.
"""

from __future__ import annotations

from modelward.attest.cli import (  # noqa: F401 - imported for their registrations
    bundle_build,
    bundle_import,
    bundle_scan,
    bundle_sign,
    bundle_verify,
    keys,
)
from modelward.attest.cli._apps import bundle_app, key_app

__all__ = ["bundle_app", "key_app"]
