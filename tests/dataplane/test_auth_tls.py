"""Security through real Envoy: client API keys checked by Envoy's api_key_auth filter (401s
in the OpenAI error shape, /v1/models included), a backend's own key added upstream (by the
router, and by the fail-open Lua filter while the router is down), client keys never
forwarded, no key in any log, admin response or client-facing header; and Envoy reaching the
router over TLS."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from tests.dataplane.conftest import CONFIG, Stack, stack_config, start_stack, stop_stack
from tests.tls_certs import self_signed

pytestmark = pytest.mark.dataplane

CLIENT_KEY = "sk-client-Wq7eR2tY9uI0"
OTHER_CLIENT_KEY = "sk-other-Kd81nB5vC3x"
BACKEND_KEY = "sk-backend-Pz4oL6mN8bV"
SECRETS = (CLIENT_KEY, OTHER_CLIENT_KEY, BACKEND_KEY)

_LISTENER = 'listener: {{address: "127.0.0.1:{listener}", admin: "127.0.0.1:{envoy_admin}"'
AUTH = CONFIG.replace(
    _LISTENER + "}}", _LISTENER + ", auth: {{api_keys_env: SR_DP_CLIENT_KEYS}}}}"
).replace(
    'endpoint: "127.0.0.1:{general}"}}', 'endpoint: "127.0.0.1:{general}", '
    "api_key_env: SR_DP_BACKEND_KEY}}")
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hello there"}]}


def _bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def _assert_clean(where: str, text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"a key leaked into {where}"


def _response_text(response: httpx.Response) -> str:
    return f"{response.status_code} {dict(response.headers)} {response.text}"


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SR_DP_CLIENT_KEYS", f"alice:{CLIENT_KEY},{OTHER_CLIENT_KEY}")
    monkeypatch.setenv("SR_DP_BACKEND_KEY", BACKEND_KEY)


async def test_keys_are_checked_hidden_and_never_leak(
        keys: None, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    assert AUTH != CONFIG
    config, _ = stack_config(template=AUTH)
    stack = await start_stack(config)
    seen: list[httpx.Response] = []
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=20) as client:
            missing = await client.post("/v1/chat/completions", json=CHAT)
            wrong = await client.post("/v1/chat/completions", json=CHAT,
                                      headers=_bearer("sk-not-a-key"))
            models_anon = await client.get("/v1/models")
            models = await client.get("/v1/models", headers=_bearer(CLIENT_KEY))
            routed = await client.post("/v1/chat/completions", json=CHAT,
                                       headers={**_bearer(CLIENT_KEY), "x-client-id": "mallory"})
            code = await client.post("/v1/chat/completions", headers=_bearer(OTHER_CLIENT_KEY),
                                     json={**CHAT, "model": "code"})
            streamed = await client.post("/v1/chat/completions", headers=_bearer(CLIENT_KEY),
                                         json={**CHAT, "stream": True})
            seen += [missing, wrong, models_anon, models, routed, code, streamed]
        for response in (missing, wrong, models_anon):
            assert response.status_code == 401, response.text
            assert response.headers["www-authenticate"] == "Bearer"
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert error["code"] == "invalid_api_key" and error["param"] is None
        assert "missing API key" in missing.json()["error"]["message"]
        assert models.status_code == 200 and routed.status_code == 200, routed.text
        assert code.status_code == 200 and streamed.status_code == 200
        assert routed.headers["x-semantic-router-model"] == "general"

        general = stack.backends["general"].requests
        assert len(general) == 2  # nothing unauthenticated reached a backend
        for request in general:
            assert request.headers["authorization"] == f"Bearer {BACKEND_KEY}"
            assert request.headers["x-client-id"] == "alice"  # Envoy's, not the client's
        to_code = stack.backends["code"].requests[-1].headers
        assert "authorization" not in to_code  # no backend key configured, client's hidden
        assert to_code["x-client-id"] == "client-2"
        for name, backend in stack.backends.items():
            for request in backend.requests:
                text = str(request.headers)
                if name == "general":  # its own key is expected there, nothing else
                    text = text.replace(f"Bearer {BACKEND_KEY}", "")
                _assert_clean(f"a request to {name}", text)

        assert stack.router is not None
        admin = f"http://127.0.0.1:{stack.router.admin_port}"
        async with httpx.AsyncClient(base_url=admin, timeout=10) as client:
            for path in ("/health", "/metrics", "/v1/workers"):
                seen.append(await client.get(path))
        # Envoy redacts api_key_auth credentials in its own admin output (verified on 1.40)
        async with httpx.AsyncClient(base_url=stack.admin_url, timeout=10) as client:
            for path in ("/config_dump", "/stats/prometheus"):
                seen.append(await client.get(path))
        await stack.envoy_flush()
        for response in seen:
            _assert_clean(f"{response.request.url}", _response_text(response))
        _assert_clean("Envoy's log", Path(stack.envoy.log_path).read_text(errors="replace"))
        # the rendered config holds the client keys: private file in a private directory
        assert stack.envoy.config_path.stat().st_mode & 0o777 == 0o600
        assert stack.envoy.config_path.parent.stat().st_mode & 0o777 == 0o700
        assert caplog.records
        for record in caplog.records:
            _assert_clean(f"log record {record.name}", f"{record.getMessage()} {record.__dict__}")
    finally:
        await stop_stack(stack)


async def test_fail_open_adds_the_backend_key(keys: None) -> None:
    config, _ = stack_config("open", template=AUTH)
    stack = await start_stack(config, with_router=False)
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=10) as client:
            response = await client.post("/v1/chat/completions", json=CHAT,
                                         headers=_bearer(CLIENT_KEY))
        assert response.status_code == 200, response.text
        headers = stack.backends["general"].requests[-1].headers
        assert headers["authorization"] == f"Bearer {BACKEND_KEY}"
    finally:
        await stop_stack(stack)


async def test_envoy_reaches_the_router_over_tls(tmp_path: Path) -> None:
    certs = self_signed(tmp_path)
    tls = (f"  tls: {{{{cert_file: {certs.cert}, key_file: {certs.key}, "
           f"ca_file: {certs.cert}}}}}\n")
    template = CONFIG.replace("  failure_mode: {failure_mode}\n",
                              "  failure_mode: {failure_mode}\n" + tls)
    config, _ = stack_config(template=template)
    assert config.router.tls is not None
    stack: Stack = await start_stack(config)
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=20) as client:
            response = await client.post("/v1/chat/completions", json={
                "model": "auto", "messages": [{"role": "user", "content": "a python function"}]})
        assert response.status_code == 200, response.text
        assert response.headers["x-semantic-router-decision"] == "code"
        assert stack.backends["code"].requests[-1].body["model"] == (  # type: ignore[index]
            "Qwen/Qwen2.5-Coder-7B-Instruct")
    finally:
        await stop_stack(stack)
