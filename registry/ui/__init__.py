"""The reviewer console: the registry's own pages under ``/ui/`` (docs/console.md).

Server-rendered (Jinja2, autoescaped), every asset served by the registry from this
package (``static/``: one stylesheet, one small script), no CDN and no build step. Every
``/ui/`` answer carries a strict Content-Security-Policy (no inline script or style),
``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer``
(``security.ConsoleHeaders``). A page shows only what the API shows the same principal:
``views`` reads through the API's service functions and authorization.
"""

from __future__ import annotations

from modelward.registry.ui.security import error_page, install, is_console_path

install_console = install

__all__ = ["error_page", "install_console", "is_console_path"]
