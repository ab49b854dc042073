"""Security settings without a running Envoy: client keys and backend keys from files and the
environment (errors name paths, never values), the rendered auth filter, local replies and
TLS cluster (each rendered document passes ``envoy --mode validate``), the CLI's refusal to
print secrets, and the router's gRPC and admin ports over TLS."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from extproc.cli import main
from extproc.config import ConfigError, RouterConfig, load_config_text
from extproc.envoy_process import validate_config
from extproc.envoy_render import EXTPROC_CLUSTER, bootstrap, fragment, to_yaml
from extproc.localnet import free_port
from extproc.security import backend_auth, client_keys, envoy_secret_paths
from extproc.server import Router
from extproc.simulated_backend import BackendSpec, SimulatedBackend
from tests.tls_certs import self_signed

CLIENT_KEY = "sk-client-Zq8wV1nT4yR"
BACKEND_KEY = "sk-backend-Hj3kL9mP2xQ"

BASE = """
listener: {{address: "127.0.0.1:{listener}", admin: "127.0.0.1:{envoy_admin}"{auth}}}
router: {{grpc: "127.0.0.1:{grpc}", admin: "127.0.0.1:{admin}", failure_mode: {mode}{tls}}}
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: g, endpoint: "127.0.0.1:{general}"{backend_key}}}]
    - name: code
      provider_model_id: Qwen/Qwen2.5-Coder-7B-Instruct
      backend_refs: [{{name: c, endpoint: "127.0.0.1:{code}"}}]
"""


def make_config(*, auth: str = "", tls: str = "", backend_key: bool = False,
                mode: str = "closed") -> tuple[str, dict[str, int]]:
    ports = {n: free_port() for n in ("listener", "envoy_admin", "grpc", "admin", "general",
                                       "code")}
    text = BASE.format(auth=f", auth: {auth}" if auth else "",
                       tls=f", tls: {tls}" if tls else "",
                       backend_key=", api_key_env: SR_TEST_BACKEND_KEY" if backend_key else "",
                       mode=mode, **ports)
    return text, ports


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("SR_TEST_CLIENT_KEYS", f"alice:{CLIENT_KEY}, sk-second-key-000")
    monkeypatch.setenv("SR_TEST_BACKEND_KEY", BACKEND_KEY)
    yield


def _filters(document: dict[str, Any]) -> list[dict[str, Any]]:
    hcm = document["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    filters: list[dict[str, Any]] = hcm["typed_config"]["http_filters"]
    return filters


# --- keys from files and the environment ----------------------------------------------------


def test_client_keys_from_file_and_env(tmp_path: Path, secret_env: None) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text("# team keys\n\nbob:sk-bob-key-123\nsk-anonymous-456\n")
    config = load_config_text(make_config(
        auth=f"{{api_keys_file: {keys_file}, api_keys_env: SR_TEST_CLIENT_KEYS}}")[0])
    assert config.listener.auth is not None
    keys = client_keys(config.listener.auth)
    assert [(k.client, k.key) for k in keys] == [
        ("bob", "sk-bob-key-123"), ("client-2", "sk-anonymous-456"),
        ("alice", CLIENT_KEY), ("client-4", "sk-second-key-000")]
    assert CLIENT_KEY not in repr(keys)


def test_key_errors_name_the_path_never_the_value(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"{CLIENT_KEY}\nbad client:x\n{CLIENT_KEY}\n")
    monkeypatch.delenv("SR_TEST_CLIENT_KEYS", raising=False)
    config = load_config_text(make_config(
        auth=f"{{api_keys_file: {keys_file}, api_keys_env: SR_TEST_CLIENT_KEYS}}")[0])
    assert config.listener.auth is not None
    with pytest.raises(ConfigError) as caught:
        client_keys(config.listener.auth)
    message = str(caught.value)
    assert f"listener.auth.api_keys_file ({keys_file}) line 2: the client id" in message
    assert "line 3: duplicates an earlier key" in message
    assert "listener.auth.api_keys_env (SR_TEST_CLIENT_KEYS): the environment variable" in message
    assert CLIENT_KEY not in message


def test_missing_backend_key_names_path_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SR_TEST_BACKEND_KEY", raising=False)
    config = load_config_text(make_config(backend_key=True)[0])
    with pytest.raises(ConfigError, match=r"providers\.models\[0\]\.backend_refs\[0\]"
                       r"\.api_key_env \(SR_TEST_BACKEND_KEY\): the environment variable is "
                       "not set"):
        backend_auth(config)
    monkeypatch.setenv("SR_TEST_BACKEND_KEY", BACKEND_KEY)
    assert dict(backend_auth(config)) == {"general": f"Bearer {BACKEND_KEY}"}


def test_mixed_backend_keys_in_one_model_are_rejected() -> None:
    text = make_config()[0].replace(
        'backend_refs: [{name: c, endpoint: "127.0.0.1:',
        'backend_refs: [{name: c2, endpoint: "127.0.0.1:1", api_key_env: K1}, '
        '{name: c, endpoint: "127.0.0.1:')
    with pytest.raises(ConfigError, match=r"providers\.models\[1\]\.backend_refs: api_key_env "
                       "differs between refs"):
        load_config_text(text)


async def test_router_refuses_to_start_without_its_backend_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SR_TEST_BACKEND_KEY", raising=False)
    router = Router(load_config_text(make_config(backend_key=True)[0]), engine=object())
    with pytest.raises(ConfigError, match="SR_TEST_BACKEND_KEY"):
        await router.start()


# --- rendering ------------------------------------------------------------------------------


def test_auth_filter_is_first_and_replies_are_openai_errors(secret_env: None) -> None:
    config = load_config_text(make_config(auth="{api_keys_env: SR_TEST_CLIENT_KEYS}")[0])
    document = bootstrap(config)
    filters = _filters(document)
    assert filters[0]["name"] == "envoy.filters.http.api_key_auth"
    auth = filters[0]["typed_config"]
    assert auth["forwarding"] == {"header": "x-client-id", "hide_credentials": True}
    assert {"key": CLIENT_KEY, "client": "alice"} in auth["credentials"]
    hcm = document["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    mappers = hcm["typed_config"]["local_reply_config"]["mappers"]
    codes = [m["body_format_override"]["json_format"]["error"]["code"] for m in mappers[:2]]
    assert codes == ["invalid_api_key", "invalid_api_key"]
    assert "missing_api_key" in mappers[0]["filter"]["extension_filter"]["typed_config"][
        "expression"]
    assert fragment(config)["http_filters"][0]["name"] == "envoy.filters.http.api_key_auth"


def test_fail_open_lua_carries_backend_key_only_when_rendered_with_secrets(
        secret_env: None) -> None:
    config = load_config_text(make_config(backend_key=True, mode="open")[0])
    assert envoy_secret_paths(config) == ["providers.models[0].backend_refs[].api_key_env"]
    assert f"Bearer {BACKEND_KEY}" in to_yaml(bootstrap(config))
    closed = load_config_text(make_config(backend_key=True)[0])
    assert envoy_secret_paths(closed) == []
    assert BACKEND_KEY not in to_yaml(bootstrap(closed))  # the router adds it, not Envoy


def test_router_tls_cluster(tmp_path: Path) -> None:
    certs = self_signed(tmp_path)
    config = load_config_text(make_config(
        tls=f"{{cert_file: {certs.cert}, key_file: {certs.key}, ca_file: {certs.cert}, "
            "server_name: localhost}")[0])
    cluster = next(c for c in bootstrap(config)["static_resources"]["clusters"]
                   if c["name"] == EXTPROC_CLUSTER)
    tls = cluster["transport_socket"]["typed_config"]
    assert tls["sni"] == "localhost"
    context = tls["common_tls_context"]
    assert context["alpn_protocols"] == ["h2"]
    assert context["validation_context"]["trusted_ca"] == {"filename": str(certs.cert)}


def _variants(tmp_path: Path) -> dict[str, RouterConfig]:
    certs = self_signed(tmp_path)
    tls = f"{{cert_file: {certs.cert}, key_file: {certs.key}, ca_file: {certs.cert}}}"
    auth = "{api_keys_env: SR_TEST_CLIENT_KEYS}"
    return {
        "plain": load_config_text(make_config()[0]),
        "auth": load_config_text(make_config(auth=auth, backend_key=True)[0]),
        "tls": load_config_text(make_config(tls=tls)[0]),
        "auth-tls-open": load_config_text(
            make_config(auth=auth, tls=tls, backend_key=True, mode="open")[0]),
    }


def test_every_variant_passes_envoy_validate(tmp_path: Path, secret_env: None) -> None:
    for name, config in _variants(tmp_path).items():
        ok, output = validate_config(to_yaml(bootstrap(config)))
        assert ok, f"{name}: {output}"


def test_render_refuses_to_print_secrets(tmp_path: Path, secret_env: None,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(make_config(auth="{api_keys_env: SR_TEST_CLIENT_KEYS}")[0])
    assert main(["envoy", "render", "-c", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--include-secrets" in captured.err and "listener.auth" in captured.err
    assert CLIENT_KEY not in captured.err
    assert main(["envoy", "render", "-c", str(path), "--include-secrets"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert _filters(printed)[0]["name"] == "envoy.filters.http.api_key_auth"


# --- the router over TLS --------------------------------------------------------------------


async def test_grpc_and_admin_serve_tls(tmp_path: Path) -> None:
    certs = self_signed(tmp_path)
    text, ports = make_config(tls=f"{{cert_file: {certs.cert}, key_file: {certs.key}}}")
    router = Router(load_config_text(text), engine=None)
    await router.start()
    try:
        credentials = grpc.ssl_channel_credentials(root_certificates=certs.cert_bytes())
        async with grpc.aio.secure_channel(f"localhost:{ports['grpc']}", credentials) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        async with grpc.aio.insecure_channel(f"127.0.0.1:{ports['grpc']}") as plain:
            with pytest.raises(grpc.aio.AioRpcError):
                await health_pb2_grpc.HealthStub(plain).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=2)
        context = ssl.create_default_context(cafile=str(certs.cert))
        async with aiohttp.ClientSession() as session, session.get(
                f"https://localhost:{ports['admin']}/metrics", ssl=context) as response:
            assert response.status == 200
    finally:
        await router.stop(grace_s=0)


async def test_readiness_probes_send_the_backend_key(secret_env: None) -> None:
    text, ports = make_config(backend_key=True)
    backend = SimulatedBackend(BackendSpec(backend_id="g", models=("Qwen/Qwen3-0.6B",),
                                           port=ports["general"], record_probes=True))
    await backend.start()
    router = Router(load_config_text(text), engine=None)
    try:
        await router.start()
        probes = [r for r in backend.requests if r.path == "/v1/models"]
        assert probes and probes[0].headers["authorization"] == f"Bearer {BACKEND_KEY}"
        ready, body = router.health()
        assert ready
        assert BACKEND_KEY not in str(body)
    finally:
        await router.stop(grace_s=0)
        await backend.stop()
