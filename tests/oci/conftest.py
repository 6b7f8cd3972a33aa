"""Fixtures for the OCI tests: a ``modelward serve`` on loopback, Debian's ``docker-registry``
(CNCF distribution 2.8) as the reference peer, and the real clients: skopeo (Debian) and oras
(the Python package). ``make test`` installs skopeo and docker-registry (Makefile)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.registry.conftest import (
    MODELWARD,
    Publisher,
    Registry,
    free_port,
    make_bundle_dir,
    new_publisher,
    pg_cluster,
    registry,
    s3_endpoint,
    start_registry,
    unique,
)

SKOPEO = shutil.which("skopeo") or "/usr/bin/skopeo"
DOCKER_REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
EMPTY_CONFIG = b"{}"


def _need(path: str, package: str) -> None:
    if not Path(path).exists():
        pytest.fail(
            f"{path} is missing: `make test` installs the Debian package {package} "
            f"(apt-get install {package})"
        )


# -- the registries ----------------------------------------------------------------------------
@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def mw(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registry]:
    """``modelward serve`` on SQLite, and on PostgreSQL (the machine's server binaries)."""
    pg = request.getfixturevalue("pg_cluster") if request.param == "postgres" else None
    reg = start_registry(request.param, tmp_path_factory.mktemp(f"mw-oci-{request.param}"), pg)
    try:
        yield reg
    finally:
        reg.close()
        reg.server.stop()


@dataclass
class Peer:
    """A running docker-registry (distribution 2.8), no auth, on loopback."""

    port: int
    proc: subprocess.Popen[bytes]

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    _need(DOCKER_REGISTRY, "docker-registry")
    base = tmp_path_factory.mktemp("peer")
    port = free_port()
    config = base / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {base / 'data'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (base / "registry.log").open("wb")
    proc = subprocess.Popen(
        [DOCKER_REGISTRY, "serve", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((base / "registry.log").read_text())
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=1).status_code == 200:
                break
        time.sleep(0.1)
    else:
        proc.terminate()
        raise RuntimeError("docker-registry did not start")
    try:
        yield Peer(port, proc)
    finally:
        proc.terminate()
        proc.wait(10)


def host_of(reg: Registry) -> str:
    return reg.url.removeprefix("http://")


# -- bundles as OCI layouts -------------------------------------------------------------------
@dataclass
class Bundle:
    root: Path  # the model directory
    built: Any  # attest.manifest.BuiltBundle
    signature: bytes  # the publisher's DSSE provenance

    @property
    def digest(self) -> str:
        return str(self.built.manifest.digest)


def new_bundle(pub: Publisher, tmp: Path) -> Bundle:
    from modelward.attest.manifest import build_bundle

    root = make_bundle_dir(tmp / unique("b"))
    built = build_bundle(root)
    return Bundle(root, built, pub.sign(built)[0])


def _blob(layout: Path, data: bytes) -> tuple[str, int]:
    import hashlib

    hexd = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / hexd).write_bytes(data)
    return f"sha256:{hexd}", len(data)


def write_layout(bundle: Bundle, layout: Path, tag: str) -> Path:
    """The bundle as an OCI image layout: its manifest under ``tag`` in index.json."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    _blob(layout, bundle.built.config_bytes)
    for f in bundle.built.files:
        _blob(layout, (bundle.root / f.path).read_bytes())
    digest, size = _blob(layout, bundle.built.manifest.raw)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": digest,
                "size": size,
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index))
    return layout


def materialize(layout: Path, tag: str, out: Path) -> tuple[str, Path]:
    """The bundle directory an OCI layout holds under ``tag`` (files at their
    org.cncf.model.filepath); returns (manifest digest, directory)."""
    index = json.loads((layout / "index.json").read_text())
    desc = next(
        m
        for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag
    )
    blob = layout / "blobs" / "sha256"
    manifest = json.loads((blob / desc["digest"].removeprefix("sha256:")).read_bytes())
    for layer in manifest["layers"]:
        target = out / layer["annotations"]["org.cncf.model.filepath"]
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(blob / layer["digest"].removeprefix("sha256:"), target)
    return desc["digest"], out


# -- clients -----------------------------------------------------------------------------------
def skopeo(
    *args: str, authfile: Path | None = None, check: bool = True, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    _need(SKOPEO, "skopeo")
    auth = ["--authfile", str(authfile)] if authfile is not None else []
    # skopeo reads a registries.conf; keep it off the machine's
    env = {**os.environ, "REGISTRY_AUTH_FILE": str(authfile or "/nonexistent")}
    cmd = [SKOPEO, "--insecure-policy", args[0], *auth, *args[1:]]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"skopeo {' '.join(args)} -> {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


def skopeo_login(reg: Registry, name: str, token: str, authfile: Path) -> None:
    result = subprocess.run(
        [
            SKOPEO,
            "login",
            "--authfile",
            str(authfile),
            "--tls-verify=false",
            "-u",
            name,
            "--password-stdin",
            host_of(reg),
        ],
        input=token,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"skopeo login -> {result.returncode}\n{result.stderr}")


def oras_client(reg: Registry | Peer, name: str | None = None, token: str | None = None) -> Any:
    import oras.provider

    host = reg.host if isinstance(reg, Peer) else host_of(reg)
    client = oras.provider.Registry(host, insecure=True, tls_verify=False)
    if name is not None and token is not None:
        # oras writes the login into a docker config file: one per test process, never the
        # shared ~/.docker/config.json that another xdist worker may be writing meanwhile
        config = Path(tempfile.gettempdir()) / f"mw-oras-{os.getpid()}" / "config.json"
        client.login(username=name, password=token, hostname=host, config_path=str(config))
    return client


def oras_attach(
    reg: Registry,
    name: str,
    token: str,
    repo: str,
    *,
    subject: str,
    subject_size: int,
    data: bytes,
    artifact_type: str,
    tmp: Path,
    expect: int = 201,
) -> str:
    """Push ``data`` as a referrer of ``subject`` with oras (artifactType, the empty config,
    one layer), by digest; returns the referrer manifest's digest. With ``expect`` other
    than 201 the manifest goes up with httpx (oras retries refusals for minutes) and the
    OCI error body must come back with that status: AssertionError carries it."""
    import hashlib

    import oras.oci

    client = oras_client(reg, name, token)
    target = f"{host_of(reg)}/{repo}"
    path = tmp / unique("att")
    path.write_bytes(data)
    layer = oras.oci.NewLayer(str(path), artifact_type, is_dir=False)
    response = client.upload_blob(str(path), target, layer)
    assert response.status_code in (200, 201), response.text
    empty = tmp / unique("empty")
    empty.write_bytes(EMPTY_CONFIG)
    config = {
        "mediaType": "application/vnd.oci.empty.v1+json",
        "digest": "sha256:" + hashlib.sha256(EMPTY_CONFIG).hexdigest(),
        "size": 2,
    }
    response = client.upload_blob(str(empty), target, config)
    assert response.status_code in (200, 201), response.text
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": artifact_type,
        "config": config,
        "layers": [layer],
        "subject": {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": subject,
            "size": subject_size,
        },
    }
    body = json.dumps(manifest).encode()
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    if expect != 201:
        bearer = bearer_for(reg, name, token, f"repository:{repo}:pull,push")
        answer = httpx.put(
            f"{reg.url}/v2/{repo}/manifests/{digest}",
            content=body,
            timeout=60,
            headers={
                "Authorization": f"Bearer {bearer}",
                "Content-Type": str(manifest["mediaType"]),
            },
        )
        assert answer.status_code == expect, answer.text
        raise AssertionError(answer.text)
    response = client.upload_manifest(manifest, client.get_container(f"{target}@{digest}"))
    if response.status_code != 201:
        raise AssertionError(f"referrer push -> {response.status_code}: {response.text}")
    return digest


def basic(name: str, token: str) -> str:
    return "Basic " + base64.b64encode(f"{name}:{token}".encode()).decode()


def bearer_for(reg: Registry, name: str, token: str, *scopes: str) -> str:
    """A bearer from the token endpoint (basic auth)."""
    answer = httpx.get(
        f"{reg.url}/v2/token",
        params={"service": "modelward", "scope": list(scopes)},
        headers={"Authorization": basic(name, token)},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["token"])


__all__ = [
    "MODELWARD",
    "Bundle",
    "Peer",
    "basic",
    "bearer_for",
    "host_of",
    "materialize",
    "new_bundle",
    "new_publisher",
    "oras_attach",
    "oras_client",
    "pg_cluster",
    "registry",
    "s3_endpoint",
    "skopeo",
    "skopeo_login",
    "write_layout",
]
