"""The release record as a readable page: one body (``templates/release_body.html``) for
``modelward release record --html`` (``release_record.html``: a standalone file, the
stylesheet the caller hands in embedded, no script) and the console's page, which includes
the same body from ``TEMPLATES_DIR``.

It shows names, digests, verdicts and figures only, never the embedded bytes; the release
gates with every figure per slice (observed rate, its interval, the bound); every value
escaped (autoescape). No I/O beyond this package's templates: callers hand in the predicate
``build_predicate`` built and the stylesheet.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

__all__ = ["TEMPLATES_DIR", "render_html", "shown"]

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
_ENV = Environment(
    loader=FileSystemLoader(TEMPLATES_DIR),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def shown(value: Any) -> str:
    """A figure as JSON (a dash for none), for the release gates table."""
    return "—" if value is None else json.dumps(value, sort_keys=True)


_ENV.filters["shown"] = shown


def render_html(predicate: Mapping[str, Any], *, css: str) -> str:
    """The release record page, standalone: ``css`` inline, no script."""
    return _ENV.get_template("release_record.html").render(p=predicate, css=css)
