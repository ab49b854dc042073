"""Secrets and TLS material: client API keys (checked by Envoy's api_key_auth filter),
per-backend credentials (added upstream by the router) and the router's own TLS files.

Secrets come only from files and environment variables, never from the router config. Every
error names the YAML path and the variable or file, never the value. ``ClientKey`` and
``Secrets`` keep their values out of ``repr`` so a stray log line cannot print them.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

import grpc

from extproc.config import ConfigError, RouterConfig
from extproc.config.schema import AuthSettings, TlsSettings

_KEY = re.compile(r"^[!-~]{1,512}$")  # printable ASCII, no spaces: a valid header value
_CLIENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")
_NO_SECRETS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ClientKey:
    client: str
    key: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Secrets:
    """What the rendered Envoy config needs in clear: client keys for api_key_auth, and
    (fail-open only) backend ``authorization`` values for the Lua fallback, by model name."""

    client_keys: tuple[ClientKey, ...] = ()
    backend_auth: Mapping[str, str] = field(default_factory=dict, repr=False)


def _parse_entry(entry: str, where: str, default_client: str,
                 errors: list[str]) -> ClientKey | None:
    client, sep, key = entry.partition(":")
    if not sep:
        client, key = default_client, entry
    client, key = client.strip(), key.strip()
    if not _CLIENT.match(client):
        errors.append(f"{where}: the client id must match {_CLIENT.pattern}")
        return None
    if not _KEY.match(key):
        errors.append(f"{where}: the key must be 1-512 printable ASCII characters, no spaces")
        return None
    return ClientKey(client, key)


def client_keys(auth: AuthSettings, environ: Mapping[str, str] | None = None) -> tuple[
        ClientKey, ...]:
    """Client keys from ``listener.auth``; raises ``ConfigError`` naming the path on a
    missing variable or file, a malformed line, a duplicate key or no key at all."""
    env = os.environ if environ is None else environ
    errors: list[str] = []
    entries: list[tuple[str, str]] = []  # (where, entry)
    if auth.api_keys_file is not None:
        where = f"listener.auth.api_keys_file ({auth.api_keys_file})"
        try:
            lines = Path(auth.api_keys_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            errors.append(f"{where}: cannot read: {type(err).__name__}")
            lines = []
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                entries.append((f"{where} line {number}", text))
    if auth.api_keys_env is not None:
        where = f"listener.auth.api_keys_env ({auth.api_keys_env})"
        value = env.get(auth.api_keys_env)
        if not value:
            errors.append(f"{where}: the environment variable is not set or empty")
        else:
            entries.extend((f"{where} item {n}", item.strip())
                           for n, item in enumerate(value.split(","), 1) if item.strip())
    keys: list[ClientKey] = []
    seen: set[str] = set()
    for number, (where, entry) in enumerate(entries, 1):
        parsed = _parse_entry(entry, where, f"client-{number}", errors)
        if parsed is None:
            continue
        if parsed.key in seen:
            errors.append(f"{where}: duplicates an earlier key")
            continue
        seen.add(parsed.key)
        keys.append(parsed)
    if not keys and not errors:
        errors.append("listener.auth: no API keys found")
    if errors:
        raise ConfigError(errors)
    return tuple(keys)


def backend_auth(config: RouterConfig,
                 environ: Mapping[str, str] | None = None) -> Mapping[str, str]:
    """``authorization`` values (``Bearer <key>``) by model name, from each backend_ref's
    ``api_key_env`` (the loader ensures a model's refs agree). Raises ``ConfigError`` naming
    the YAML path and variable when one is unset or unusable as a header value."""
    env = os.environ if environ is None else environ
    errors: list[str] = []
    out: dict[str, str] = {}
    for i, model in enumerate(config.source.providers.models):
        for j, ref in enumerate(model.backend_refs):
            if ref.api_key_env is None or model.name in out:
                continue
            where = f"providers.models[{i}].backend_refs[{j}].api_key_env ({ref.api_key_env})"
            value = env.get(ref.api_key_env, "").strip()
            if not value:
                errors.append(f"{where}: the environment variable is not set or empty")
            elif not _KEY.match(value):
                errors.append(f"{where}: the key must be printable ASCII with no spaces")
            else:
                out[model.name] = f"Bearer {value}"
    if errors:
        raise ConfigError(errors)
    return MappingProxyType(out)


def envoy_secret_paths(config: RouterConfig) -> list[str]:
    """Which settings put secrets in clear into the rendered Envoy config."""
    paths = ["listener.auth"] if config.listener.auth is not None else []
    if config.router.failure_mode == "open":
        paths.extend(
            f"providers.models[{i}].backend_refs[].api_key_env"
            for i, model in enumerate(config.source.providers.models)
            if any(ref.api_key_env for ref in model.backend_refs))
    return paths


def envoy_secrets(config: RouterConfig, environ: Mapping[str, str] | None = None) -> Secrets:
    """The secrets the rendered Envoy config needs (none when auth is off and fail-open is
    not used with backend keys)."""
    auth = config.listener.auth
    keys = client_keys(auth, environ) if auth is not None else ()
    backends = backend_auth(config, environ) if config.router.failure_mode == "open" else None
    return Secrets(keys, backends or _NO_SECRETS)


def _read(path: str, where: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ConfigError([f"{where}: cannot read '{path}': {type(err).__name__}"]) from err


def grpc_server_credentials(tls: TlsSettings) -> grpc.ServerCredentials:
    """Credentials for the ext_proc gRPC port (EDS and grpc.health.v1 share it)."""
    key = _read(tls.key_file, "router.tls.key_file")
    cert = _read(tls.cert_file, "router.tls.cert_file")
    return grpc.ssl_server_credentials([(key, cert)])


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """The admin HTTP site's TLS context (TLS 1.2 or later)."""
    _read(tls.cert_file, "router.tls.cert_file")
    _read(tls.key_file, "router.tls.key_file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as err:
        raise ConfigError([f"router.tls: cannot load the certificate and key: {err.reason}"]
                          ) from err
    return context
