"""Names the registry and its clients must agree on, defined once.

An alias (or OCI tag naming one) is 1 to ``ALIAS_MAX`` characters: a letter or digit, then
letters, digits, ``.``, ``_`` or ``-``. The registry refuses any other (``moves.service``)
and the client refuses it before sending anything (``registry._client_config``), with the
same pattern, so neither can accept what the other refuses.

A repository is ``ORG/NAME``, each part 1 to ``REPOSITORY_PART_MAX`` characters: a lowercase
letter or digit, then lowercase letters, digits, ``.``, ``_`` or ``-`` (``REPOSITORY_RE``,
its two parts as groups 1 and 2), used by the registry (``repos.service``) and the client.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["ALIAS_MAX", "ALIAS_RE", "REPOSITORY_PART_MAX", "REPOSITORY_RE"]

ALIAS_MAX: Final = 100
ALIAS_RE: Final = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{ALIAS_MAX - 1}}}$")

REPOSITORY_PART_MAX: Final = 100
_PART = rf"[a-z0-9][a-z0-9._-]{{0,{REPOSITORY_PART_MAX - 1}}}"
REPOSITORY_RE: Final = re.compile(rf"^({_PART})/({_PART})$")
