"""The release record as a readable page: one body (``templates/release_body.html``) for
``modelward release record --html`` (``release_record.html``: a standalone file, the
console's stylesheet embedded, no script) and the console's page (``release.html``).

It shows names, digests, verdicts and figures only, never the embedded bytes; the release
gates with every figure per slice (observed rate, its interval, the bound); every value
escaped (autoescape). No I/O: callers hand in the predicate ``attest.release`` built.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

__all__ = ["render_release_html", "shown"]

HERE = Path(__file__).resolve().parent
_ENV = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)


def shown(value: Any) -> str:
    """A figure as JSON (a dash for none), for the release gates table."""
    return "—" if value is None else json.dumps(value, sort_keys=True)


_ENV.filters["shown"] = shown


def render_release_html(predicate: Mapping[str, Any]) -> str:
    """The release record page, standalone (styles inline, no script)."""
    css = (HERE / "static" / "console.css").read_text(encoding="utf-8")
    return _ENV.get_template("release_record.html").render(p=predicate, css=css)
