"""The API reference page (``/ui/api``; ``/docs`` and ``/redoc`` lead to it): the app's own
OpenAPI schema rendered server-side, with no script and nothing from elsewhere, so it works
under the console's CSP on a registry with no internet access (docs/console.md#api-reference).
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["api_page"]

METHODS = ("get", "put", "post", "patch", "delete", "head")


def _schema_name(schema: Any) -> str:
    """A schema as a short name: its ``$ref``'s last part, an array of one, or its type."""
    if not isinstance(schema, dict):
        return ""
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items')) or 'any'}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " | ".join(_schema_name(s) or "any" for s in schema[key])
    return str(schema.get("type", ""))


def _anchor(method: str, path: str) -> str:
    return f"{method}{path}".replace("/", "-").replace("{", "").replace("}", "")


def _body(operation: dict[str, Any]) -> str | None:
    content = (operation.get("requestBody") or {}).get("content") or {}
    return ", ".join(f"{kind}: {_schema_name(v.get('schema'))}" for kind, v in content.items())


def api_page(openapi: dict[str, Any]) -> dict[str, Any]:
    """Every operation by tag (``tags``: name -> operations, each with method, path,
    summary, description, parameters, body, responses) and every schema as JSON."""
    tags: dict[str, list[dict[str, Any]]] = {}
    for path, item in sorted(openapi.get("paths", {}).items()):
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            tags.setdefault((op.get("tags") or ["other"])[0], []).append(
                {
                    "method": method.upper(),
                    "path": path,
                    "anchor": f"{method}-{path}".replace("/", "-")
                    .replace("{", "")
                    .replace("}", ""),
                    "summary": op.get("summary", ""),
                    "description": op.get("description", ""),
                    "parameters": [
                        {
                            "name": p.get("name"),
                            "in": p.get("in"),
                            "required": bool(p.get("required")),
                            "schema": _schema_name(p.get("schema")),
                        }
                        for p in op.get("parameters", [])
                    ],
                    "body": _body(op),
                    "responses": sorted(op.get("responses", {})),
                }
            )
    schemas = openapi.get("components", {}).get("schemas", {})
    return {
        "info": openapi.get("info", {}),
        "tags": dict(sorted(tags.items())),
        "schemas": {k: json.dumps(v, indent=2, sort_keys=True) for k, v in sorted(schemas.items())},
    }
