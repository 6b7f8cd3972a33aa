"""A registry stand-in that serves whatever a test tells it to: it plays a compromised or
lying registry, so the tests show the worker checks everything itself.

It speaks the read side of the registry API (docs: /v1) that ``modelward pull`` uses, over
real HTTP on 127.0.0.1, and records boots, attestations and Range requests it receives.

It can also send more or fewer bytes than it should: ``blob_tail``/``manifest_tail`` zero
bytes after every blob/manifest (with ``declare_length=False`` without a Content-Length, the
body then ends only when the connection closes), ``blob_short_by`` bytes fewer; ``sent``
records how many bytes each over-long answer got out before the client hung up.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Served:
    """One bundle as served: manifest bytes, blobs, attestations, quarantine state."""

    repo: str
    digest: str
    manifest: bytes
    blobs: dict[str, bytes]
    attestations: list[bytes]
    quarantined: bool = False
    alias: str = "prod"

    def manifest_layer_hex(self, path: str) -> str:
        for layer in json.loads(self.manifest)["layers"]:
            if layer["annotations"]["org.cncf.model.filepath"] == path:
                return str(layer["digest"]).removeprefix("sha256:")
        raise KeyError(path)


@dataclass
class HostileRegistry:
    bundles: dict[str, Served] = field(default_factory=dict)
    boots: list[dict[str, Any]] = field(default_factory=list)
    ranges: list[str] = field(default_factory=list)
    added: list[bytes] = field(default_factory=list)
    cut_blob_after: int | None = None  # cut the next blob download after N bytes
    blob_tail: int = 0  # zero bytes sent after each blob's real bytes
    manifest_tail: int = 0  # zero bytes sent after the manifest's real bytes
    blob_short_by: int = 0  # each blob ends this many bytes early (Content-Length to match)
    declare_length: bool = True  # False: over-long answers carry no Content-Length
    sent: list[int] = field(default_factory=list)  # bytes out per over-long answer
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add(self, served: Served) -> None:
        self.bundles[served.repo] = served

    def start(self) -> None:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(
                self,
                code: int,
                body: bytes,
                ctype: str = "application/json",
                headers: dict[str, str] | None = None,
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _send_long(
                self, code: int, body: bytes, tail: int, headers: dict[str, str] | None = None
            ) -> None:
                """``body`` then ``tail`` zero bytes, until done or the client hangs up."""
                self.send_response(code)
                self.send_header("Content-Type", "application/octet-stream")
                if registry.declare_length:
                    self.send_header("Content-Length", str(len(body) + tail))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.close_connection = True  # HTTP/1.0: without a length, close ends it
                sent = 0
                zeros = bytes(2**16)
                try:
                    self.wfile.write(body)
                    sent += len(body)
                    while sent < len(body) + tail:
                        block = zeros[: len(body) + tail - sent]
                        self.wfile.write(block)
                        sent += len(block)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass
                registry.sent.append(sent)

            def _json(self, code: int, obj: Any) -> None:
                self._send(code, json.dumps(obj).encode())

            def _not_found(self) -> None:
                self._json(
                    404, {"error": {"code": "not_found", "message": "not found", "detail": None}}
                )

            def do_GET(self) -> None:
                path = self.path
                m = re.fullmatch(r"/v1/blobs/(sha256:[0-9a-f]{64})", path)
                if m:
                    return self._blob(m.group(1))
                m = re.fullmatch(r"/v1/repos/([^/]+)/([^/]+)/(.*)", path)
                if not m:
                    return self._not_found()
                served = registry.bundles.get(f"{m.group(1)}/{m.group(2)}")
                rest = m.group(3)
                if served is None:
                    return self._not_found()
                if rest == f"aliases/{served.alias}":
                    return self._json(
                        200, {"alias": served.alias, "digest": served.digest, "version": 1}
                    )
                if rest == f"bundles/{served.digest}":
                    return self._json(
                        200,
                        {
                            "digest": served.digest,
                            "manifest": base64.b64encode(served.manifest).decode(),
                            "quarantined": served.quarantined,
                            "quarantine_reason": "malware found" if served.quarantined else None,
                            "tombstoned": False,
                            "created_by": "p",
                            "created_at": "now",
                        },
                    )
                if rest == f"bundles/{served.digest}/manifest":
                    if registry.manifest_tail:
                        return self._send_long(200, served.manifest, registry.manifest_tail)
                    return self._send(200, served.manifest, "application/octet-stream")
                if rest == f"bundles/{served.digest}/attestations":
                    items = [*served.attestations, *registry.added]
                    return self._json(
                        200,
                        [
                            {
                                "id": str(i),
                                "kind": "dsse",
                                "predicate_type": _ptype(a),
                                "data": base64.b64encode(a).decode(),
                            }
                            for i, a in enumerate(items)
                        ],
                    )
                return self._not_found()

            def _blob(self, digest: str) -> None:
                data = next(
                    (s.blobs[digest] for s in registry.bundles.values() if digest in s.blobs), None
                )
                if data is None:
                    return self._not_found()
                rng = self.headers.get("Range")
                start = 0
                if rng:
                    registry.ranges.append(rng)
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                if registry.blob_short_by:
                    data = data[: -registry.blob_short_by]
                body = data[start:]
                cut = registry.cut_blob_after
                code = 206 if rng else 200
                headers = (
                    {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"} if rng else {}
                )
                if cut is not None and len(body) > cut:
                    registry.cut_blob_after = None
                    self.send_response(code)
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                if registry.blob_tail:
                    return self._send_long(code, body, registry.blob_tail, headers)
                return self._send(code, body, "application/octet-stream", headers)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.path.endswith("/boots"):
                    registry.boots.append(json.loads(body))
                    return self._json(201, {"id": len(registry.boots)})
                if self.path.endswith("/attestations"):
                    registry.added.append(body)
                    return self._json(
                        201, {"id": "x", "kind": "dsse", "predicate_type": _ptype(body)}
                    )
                return self._not_found()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


def _ptype(envelope: bytes) -> str:
    try:
        payload = json.loads(base64.b64decode(json.loads(envelope)["payload"]))
        return str(payload["predicateType"])
    except (ValueError, KeyError):
        return "unknown"


def serve_dir(root: Path, repo: str, attestations_for: Any) -> Served:
    """Build the bundle at ``root``; ``attestations_for(built)`` returns its attestations."""
    from modelward.attest.manifest import build_bundle

    built = build_bundle(root)
    blobs = {
        f_layer.digest: (root / f_layer.path).read_bytes() for f_layer in built.manifest.layers
    }
    return Served(
        repo=repo,
        digest=built.manifest.digest,
        manifest=built.manifest.raw,
        blobs=blobs,
        attestations=list(attestations_for(built)),
    )
