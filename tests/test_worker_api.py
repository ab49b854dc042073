"""The worker API and readiness over HTTP, in process: identifiers and endpoints Envoy could
never use are 400s, a second worker at an endpoint already serving a model is a 409, the
admin token read from the environment is stripped like the header's, and config-file workers
count as routable with static discovery (they are rendered into Envoy's static clusters)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from extproc.config import load_config_text
from extproc.localnet import free_port
from extproc.server import Router
from extproc.simulated_backend import BackendSpec, SimulatedBackend

TOKEN_ENV = "SR_TEST_WORKER_API_TOKEN"
MODEL_ID = "Qwen/Qwen3-0.6B"
CONFIG = """
router:
  admin_token_env: SR_TEST_WORKER_API_TOKEN
  probe: {{interval_s: 0.3, timeout_s: 0.5, startup_timeout_s: 2}}
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: general-1, endpoint: "127.0.0.1:{dead}"}}]
"""


def worker(worker_id: str, port: int, /, **changes: Any) -> dict[str, Any]:
    return {"worker_id": worker_id, "worker_type": "nvidia-gpu", "runtime": "cuda",
            "runtime_endpoint": f"http://127.0.0.1:{port}/v1", "supported_models": [MODEL_ID],
            "runtime_config": {"transport": "openai"}, **changes}


@pytest.fixture
async def backend() -> AsyncIterator[SimulatedBackend]:
    async with SimulatedBackend(BackendSpec("w", (MODEL_ID,))) as running:
        yield running


async def _router(config_text: str) -> Router:
    router = Router(load_config_text(config_text), grpc_address="127.0.0.1:0",
                    admin_address="127.0.0.1:0", logger=logging.getLogger("test.router"))
    await router.start()
    return router


@pytest.fixture
async def admin(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    monkeypatch.setenv(TOKEN_ENV, "tok-from-a-secret-file\n")  # as a mounted secret ends
    router = await _router(CONFIG.format(dead=free_port()))
    headers = {"authorization": "Bearer tok-from-a-secret-file"}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{router.admin_port}",
                                     headers=headers) as client:
            yield client
    finally:
        await router.stop(0.5)


async def test_token_from_the_environment_is_stripped(admin: httpx.AsyncClient,
                                                      backend: SimulatedBackend) -> None:
    response = await admin.post("/v1/workers", json=worker("w1", backend.port))
    assert response.status_code == 201, response.text
    wrong = await admin.delete("/v1/workers/w1", headers={"authorization": "Bearer tok"})
    assert wrong.status_code == 401


async def test_refused_writes_are_logged_without_the_token_and_text_is_415(
        admin: httpx.AsyncClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="test.router"):
        wrong = await admin.post("/v1/workers", json=worker("w2", 1),
                                 headers={"authorization": "Bearer not-the-token-42"})
    assert wrong.status_code == 401
    (record,) = [r for r in caplog.records if "refused" in r.getMessage()]
    assert record.path == "/v1/workers" and record.method == "POST"  # type: ignore[attr-defined]
    assert "not-the-token-42" not in caplog.text and "tok-from-a-secret" not in caplog.text
    text = await admin.post("/v1/workers", content=b'{"worker_id": "w2"}',
                            headers={"content-type": "text/plain"})
    assert text.status_code == 415 and text.json()["error"]["code"] == "unsupported_media_type"


@pytest.mark.parametrize(("changes", "words"), [
    ({"worker_id": "wnl\n"}, "must match"),
    ({"runtime": "cuda\n"}, "must match"),
    ({"runtime_endpoint": "http://127.0.0.1:0/v1"}, "port must be 1-65535"),
    ({"runtime_endpoint": "http://exa mple:8000/v1"}, "not an IP address or DNS name"),
    ({"runtime_endpoint": "http://my_host:8000/v1"}, "not an IP address or DNS name"),
    ({"runtime_endpoint": "http://[fe80::1%25eth0]:8000/v1"}, "zone ids"),
])
async def test_unusable_identifiers_and_endpoints_are_400(
        admin: httpx.AsyncClient, changes: dict[str, Any], words: str) -> None:
    response = await admin.post("/v1/workers", json=worker("w1", 8000, **changes))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == next(iter(changes)) and words in error["message"]
    assert (await admin.get("/v1/workers")).json()["data"] == []


async def test_an_endpoint_in_use_for_a_model_is_409(admin: httpx.AsyncClient,
                                                     backend: SimulatedBackend) -> None:
    assert (await admin.post("/v1/workers", json=worker("w1", backend.port))).status_code == 201
    clash = await admin.post("/v1/workers", json=worker("w2", backend.port,
                                                        supported_models=["general"]))
    assert clash.status_code == 409
    assert clash.json()["error"] == {
        "message": f"runtime_endpoint: 127.0.0.1:{backend.port} already serves model "
                   "'general' as worker 'w1'",
        "type": "invalid_request_error", "param": "runtime_endpoint", "code": "endpoint_in_use",
        "errors": [{"field": "runtime_endpoint", "reason": f"127.0.0.1:{backend.port} already "
                    "serves model 'general' as worker 'w1'"}]}
    update = await admin.post("/v1/workers", json=worker("w1", backend.port, weight=3))
    assert update.status_code == 200 and update.json()["weight"] == 3
    listed = (await admin.get("/v1/workers")).json()["data"]
    assert [(w["worker_id"], w["weight"]) for w in listed] == [("w1", 3)]


async def test_config_workers_are_routable_with_static_discovery(
        monkeypatch: pytest.MonkeyPatch, backend: SimulatedBackend) -> None:
    """The default model's config backend is down; its config-file worker serves it (Envoy's
    static cluster holds it), so the model and /health are ready. An API-registered worker
    is still not routable with static discovery."""
    monkeypatch.setenv(TOKEN_ENV, "t")
    text = CONFIG.format(dead=free_port()) + f"""
workers:
  - worker_id: cfg-1
    worker_type: nvidia-gpu
    runtime: cuda
    runtime_endpoint: http://127.0.0.1:{backend.port}/v1
    supported_models: [general]
    runtime_config: {{transport: openai}}
"""
    router = await _router(text)
    try:
        async with SimulatedBackend(BackendSpec("api", (MODEL_ID,))) as other, \
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{router.admin_port}") as client:
            posted = await client.post("/v1/workers", json=worker("api-1", other.port),
                                       headers={"authorization": "Bearer t"})
            assert posted.status_code == 201, posted.text
            health = await client.get("/health")
            metrics = (await client.get("/metrics")).text
    finally:
        await router.stop(0.5)
    assert health.status_code == 200, health.text
    model = health.json()["models"]["general"]
    shown = {e["name"]: (e["source"], e["ready"], e["routable"]) for e in model["endpoints"]}
    assert model["ready"]
    assert shown == {"general-1": ("config", False, True), "cfg-1": ("worker", True, True),
                     "api-1": ("worker", False, False)}
    assert 'semantic_router_model_ready_endpoints{model="general"} 1.0' in metrics


async def test_metadata_self_and_config_endpoints_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Over HTTP: a cloud-metadata or link-local endpoint and the router's own ports are 400s
    naming ``runtime_endpoint`` (the router would probe them, then route to them); a config
    backend's endpoint is a 409 like another worker's; a 5000-digit number is a plain 400."""
    monkeypatch.setenv(TOKEN_ENV, "t")
    dead = free_port()
    router = await _router(CONFIG.format(dead=dead))
    listener = router.config.listener.address.rsplit(":", 1)[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{router.admin_port}",
                                     headers={"authorization": "Bearer t"}) as client:
            answers = {}
            for name, endpoint in (
                    ("metadata", "http://169.254.169.254/v1"),
                    ("mapped", "http://[::ffff:169.254.169.254]:80/v1"),
                    ("gcp", "http://metadata.google.internal/v1"),
                    ("unspecified", "http://0.0.0.0:8000/v1"),
                    ("admin", f"http://127.0.0.1:{router.admin_port}/v1"),
                    ("grpc", f"http://localhost:{router.grpc_port}/v1"),
                    ("listener", f"http://127.0.0.1:{listener}/v1"),
                    ("config", f"http://127.0.0.1:{dead}/v1")):
                response = await client.post("/v1/workers",
                                             json=worker(name, 1, runtime_endpoint=endpoint))
                error = response.json()["error"]
                assert error["param"] == "runtime_endpoint", error
                answers[name] = (response.status_code, error["code"])
            huge = await client.post("/v1/workers", content=b'{"weight": ' + b"9" * 5000 + b"}",
                                     headers={"content-type": "application/json"})
            listed = (await client.get("/v1/workers")).json()["data"]
    finally:
        await router.stop(0.5)
    assert answers == {**{k: (400, "invalid_worker") for k in answers},
                       "config": (409, "endpoint_in_use")}
    assert huge.status_code == 400
    assert huge.json()["error"]["message"] == "body has an integer of more than 32 digits"
    assert listed == []
