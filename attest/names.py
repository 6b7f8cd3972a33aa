"""Names the registry and its clients must agree on, defined once.

An alias (or OCI tag naming one) is 1 to ``ALIAS_MAX`` characters: a letter or digit, then
letters, digits, ``.``, ``_`` or ``-``. The registry refuses any other (``aliases.moves``)
and the client refuses it before sending anything (``registry._client_config``), with the
same pattern, so neither can accept what the other refuses.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["ALIAS_MAX", "ALIAS_RE"]

ALIAS_MAX: Final = 100
ALIAS_RE: Final = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{ALIAS_MAX - 1}}}$")
