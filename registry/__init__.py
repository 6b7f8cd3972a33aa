"""modelward.registry: the registry service (``modelward serve``), the server wing.

It holds no HTTP client and no command line: the client library is ``modelward.client`` and
the commands are ``modelward.cli``'s. The service is built by ``create_app(settings)``, from
``load_settings(...)`` (``MODELWARD_`` variables, a config file, overrides). Importing this
package loads neither FastAPI nor SQLAlchemy; the names below load them on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from modelward._exports import lazy_exports

if TYPE_CHECKING:
    from modelward.registry.app import create_app
    from modelward.registry.errors import RegistryError
    from modelward.registry.settings import Settings, load_settings

__all__ = ["RegistryError", "Settings", "create_app", "load_settings"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "RegistryError": "modelward.registry.errors",
        "Settings": "modelward.registry.settings",
        "create_app": "modelward.registry.app",
        "load_settings": "modelward.registry.settings",
    },
)
