"""Client settings: the per-user config file, environment overrides, and reference parsing
(``REPO@ALIAS``, ``REPO:TAG``, ``REPO@sha256:...``: ``parse_reference``).

The config file is ``$XDG_CONFIG_HOME/modelward/config.toml`` (``~/.config/...`` by default),
written with mode 0600 because it holds a bearer token. ``MODELWARD_URL`` and
``MODELWARD_TOKEN`` override what it says. Only the CLI calls ``resolve_settings``; the client
class itself takes its URL and token as arguments and reads no environment.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from modelward.attest.names import ALIAS_MAX, ALIAS_RE, REPOSITORY_RE
from modelward.client.errors import ClientConfigError, InvalidReference

__all__ = [
    "ClientSettings",
    "Reference",
    "cache_dir",
    "config_path",
    "normalize_url",
    "parse_reference",
    "parse_repo",
    "resolve_settings",
    "save_login",
]

_REPO_RE = REPOSITORY_RE  # attest.names: the registry's grammar, so neither refuses the other's
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ClientSettings:
    """Where the registry is and how to authenticate to it."""

    url: str
    token: str


@dataclass(frozen=True)
class Reference:
    """``org/name@alias`` (or ``org/name:tag``) or ``org/name@sha256:<hex>``; exactly one of
    alias/digest is set."""

    repo: str
    alias: str | None = None
    digest: str | None = None

    def __str__(self) -> str:
        return f"{self.repo}@{self.digest or self.alias}"


def parse_repo(text: str) -> str:
    """Validate ``org/name`` (lowercase letters, digits, ``._-``); raise ``InvalidReference``."""
    if not _REPO_RE.fullmatch(text):
        raise InvalidReference(
            text, "a repository is ORG/NAME: lowercase letters, digits, '.', '_' or '-'"
        )
    return text


REFERENCE_FORMS = "REPO@ALIAS or REPO@sha256:<64 hex>, or REPO:TAG"


def parse_reference(text: str, *, require: str | None = None) -> Reference:
    """Parse a reference: the one grammar every command and the loader use (docs/cli.md).

    1. ``org/name@sha256:<64 hex>`` is a digest;
    2. ``org/name@alias`` is an alias;
    3. ``org/name:tag`` (no ``@``) is the alias ``tag``, as OCI tools write it: unambiguous,
       since a repository name holds no ``:`` and a tag must be a valid alias name
       (``org/name:sha256:...`` is refused: a digest is written with ``@``).

    ``require`` is ``"alias"`` or ``"digest"`` when only one form is acceptable.
    Raises ``InvalidReference`` naming what is wrong and the form expected.
    """
    forms = {"alias": "REPO@ALIAS or REPO:TAG", "digest": "REPO@sha256:<64 hex>"}.get(
        require or "", REFERENCE_FORMS
    )
    # (3): REPO:TAG, only where there is no '@' and the part before the last ':' is a repo
    repo, sep, ref = text.partition("@")
    tagged = False
    if not sep and ":" in text:
        repo, _, ref = text.partition(":")
        sep, tagged = ":", True
    if not sep:
        raise InvalidReference(text, f"no '@': expected {forms}, e.g. acme/tiny-llama@prod")
    if not ref:
        raise InvalidReference(text, f"nothing after {sep!r}: expected {forms}")
    try:
        parse_repo(repo)
    except InvalidReference as exc:
        raise InvalidReference(text, f"{exc.reason}; expected {forms}") from None
    if tagged and ":" in ref:
        raise InvalidReference(
            text, "a digest is written REPO@sha256:<64 hex>, with '@'; a tag holds no ':'"
        )
    # (1): a digest
    if ref.startswith("sha256:") or ":" in ref:
        if not _DIGEST_RE.match(ref):
            raise InvalidReference(text, "a digest is sha256: followed by 64 lowercase hex digits")
        if require == "alias":
            raise InvalidReference(text, f"expected an alias here ({forms}), not a digest")
        return Reference(repo=repo, digest=ref)
    # (2): an alias (or a tag, which is one)
    if not ALIAS_RE.fullmatch(ref):
        what = "a tag is an alias name:" if tagged else "an alias is"
        raise InvalidReference(
            text, f"{what} letters, digits, '.', '_' or '-' (at most {ALIAS_MAX})"
        )
    if require == "digest":
        raise InvalidReference(text, "expected a digest here (REPO@sha256:<64 hex>)")
    return Reference(repo=repo, alias=ref)


def normalize_url(url: str) -> tuple[str, str | None]:
    """The registry's base URL, and a note when it was changed.

    A trailing ``/`` is dropped; a path ending in ``/v1`` (the API prefix, which every request
    adds itself) is dropped with a note. Raises ``ClientConfigError`` for anything but
    ``http://HOST[:PORT][/PATH]`` or ``https://...``.
    """
    from urllib.parse import urlsplit

    text = url.strip()
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise ClientConfigError(f"registry URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClientConfigError(
            f"registry URL {url!r}: expected http://HOST:PORT or https://HOST, "
            "e.g. http://127.0.0.1:8700"
        )
    if parts.query or parts.fragment:
        raise ClientConfigError(f"registry URL {url!r}: no query or fragment, please")
    base = text.rstrip("/")
    path = parts.path.rstrip("/")
    if path == "/v1" or path.endswith("/v1"):
        stripped = base[: -len("/v1")]
        return stripped, (
            f"using {stripped}: the registry URL is the server's root; "
            "every request adds /v1 itself"
        )
    return base, None


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/modelward/config.toml`` (``~/.config`` when unset)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "modelward" / "config.toml"


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/modelward`` (``~/.cache`` when unset): upload-session state lives here."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "modelward"


def _toml_string(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    if any(ord(c) < 0x20 for c in escaped):
        raise ClientConfigError("URL and token must not contain control characters")
    return f'"{escaped}"'


def save_login(url: str, token: str, env: Mapping[str, str] | None = None) -> Path:
    """Write URL and token to the config file, created with mode 0600; return its path."""
    path = config_path(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = f"url = {_toml_string(normalize_url(url)[0])}\ntoken = {_toml_string(token)}\n"
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    tmp.chmod(0o600)
    tmp.replace(path)
    return path


def resolve_settings(env: Mapping[str, str] | None = None) -> ClientSettings:
    """The config file's URL/token, overridden by ``MODELWARD_URL``/``MODELWARD_TOKEN``.

    Raises ``ClientConfigError`` when either is missing or the file is unreadable.
    """
    env = os.environ if env is None else env
    path = config_path(env)
    stored: dict[str, object] = {}
    if path.exists():
        try:
            stored = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ClientConfigError(f"cannot read {path}: {exc}") from exc
    url = env.get("MODELWARD_URL") or stored.get("url")
    token = env.get("MODELWARD_TOKEN") or stored.get("token")
    if not isinstance(url, str) or not url:
        raise ClientConfigError(
            "no registry URL: run `modelward login URL --token T` or set MODELWARD_URL"
        )
    if not isinstance(token, str) or not token:
        raise ClientConfigError(
            "no registry token: run `modelward login URL --token T` or set MODELWARD_TOKEN"
        )
    return ClientSettings(url=normalize_url(url)[0], token=token)
