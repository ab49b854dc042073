"""The router's backend side, in process: ``/health`` JSON and status codes (and
``/readyz``/``/livez``, which do not follow the backends), the worker API (auth, OpenAI-style
errors), persistence across a restart, workers' readiness by discovery mode, EDS over gRPC
(push, ACK, NACK), ``semantic-router status`` and ``config validate --probe``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
from envoy_data_plane.envoy.service.discovery.v3 import DiscoveryRequest, DiscoveryResponse
from envoy_data_plane.google.rpc import Status

from extproc.cli import main
from extproc.config import RouterConfig, load_config_text
from extproc.eds import CLA_TYPE_URL, EDS_SERVICE
from extproc.localnet import free_port
from extproc.server import Router
from extproc.simulated_backend import BackendSpec, SimulatedBackend

TOKEN = "test-admin-token-value"
CONFIG = """
router:
  admin_token_env: SR_TEST_ADMIN_TOKEN
  probe: {{interval_s: 0.3, timeout_s: 0.5, startup_timeout_s: 2}}
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: general-1, endpoint: "127.0.0.1:{general}", weight: 2}}]
    - name: code
      provider_model_id: Qwen/Qwen2.5-Coder-7B-Instruct
      backend_refs: [{{name: code-1, endpoint: "127.0.0.1:{code}"}}]
"""
WORKER = {
    "worker_id": "cuda-01", "worker_type": "nvidia-gpu", "runtime": "cuda",
    "supported_models": ["Qwen/Qwen2.5-Coder-7B-Instruct"],
    "runtime_config": {"transport": "openai"}, "gpu_metadata": {"product": "operator-reported"},
}


class Env:
    def __init__(self, config: RouterConfig, backends: dict[str, SimulatedBackend]) -> None:
        self.config = config
        self.backends = backends
        self.router: Router | None = None

    async def start_router(self, state_dir: Path | None = None) -> Router:
        self.router = Router(self.config, grpc_address="127.0.0.1:0",
                             admin_address="127.0.0.1:0", state_dir=state_dir,
                             logger=logging.getLogger("test.router"))
        await self.router.start()
        return self.router

    @property
    def admin(self) -> str:
        assert self.router is not None
        return f"http://127.0.0.1:{self.router.admin_port}"


@pytest.fixture
async def env(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Env]:
    monkeypatch.setenv("SR_TEST_ADMIN_TOKEN", TOKEN)
    ports = {"general": free_port(), "code": free_port()}
    config = load_config_text(CONFIG.format(**ports))
    backends = {
        # "code" answers with a model id other than the configured one
        "general": SimulatedBackend(BackendSpec("general-1", ("Qwen/Qwen3-0.6B",),
                                                port=ports["general"])),
        "code": SimulatedBackend(BackendSpec("code-1", ("Qwen/Qwen2.5-Coder-7B",),
                                             port=ports["code"])),
    }
    for backend in backends.values():
        await backend.start()
    running = Env(config, backends)
    yield running
    if running.router is not None:
        await running.router.stop(0.5)
    for backend in backends.values():
        await backend.stop()


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_health_names_each_classifier_binding(env: Env) -> None:
    from classifiers.api import Binding

    router = await env.start_router()
    bindings = [Binding("domain", "heads/domain", "cpu", "float32", 2.1, "traced"),
                Binding("pii_model", "tiny-ner", "cpu", "float32", 0.4)]
    _, body = router.backends.report(started=True, bindings=bindings)
    assert body["classifiers"] == [
        {"classifier": "domain", "model": "heads/domain", "device": "cpu", "dtype": "float32",
         "execution": "traced"},
        {"classifier": "pii_model", "model": "tiny-ner", "device": "cpu", "dtype": "float32",
         "execution": "eager"},
    ]


async def test_health_json_and_status_codes(env: Env) -> None:
    await env.start_router()
    async with httpx.AsyncClient(base_url=env.admin) as client:
        response = await client.get("/health")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "ready" and body["reasons"] == []
        assert body["classifiers"] == [] and body["default_model"] == "general"
        general, code = body["models"]["general"], body["models"]["code"]
        assert general["ready"] and general["endpoints"][0]["reason"] == "lists Qwen/Qwen3-0.6B"
        assert general["endpoints"][0]["weight"] == 2
        assert not code["ready"]
        assert code["endpoints"][0]["reason"] == (
            "lists [Qwen/Qwen2.5-Coder-7B] but not Qwen/Qwen2.5-Coder-7B-Instruct")
        assert code["endpoints"][0]["last_probe"]["models"] == ["Qwen/Qwen2.5-Coder-7B"]

        await env.backends["general"].stop()  # the default model goes down: 503
        for _ in range(40):
            response = await client.get("/health")
            if response.status_code == 503:
                break
            await asyncio.sleep(0.1)
        assert response.status_code == 503
        body = response.json()
        assert body["status"] == "not_ready"
        assert body["models"]["general"]["endpoints"][0]["reason"] == "connection refused"
        assert "default model 'general' has no ready endpoint" in body["reasons"][0]


async def test_readyz_and_livez_do_not_follow_the_backends(env: Env) -> None:
    await env.backends["general"].stop()  # the default model's only endpoint is down
    router = await env.start_router()
    async with httpx.AsyncClient(base_url=env.admin) as client:
        health = await client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "not_ready"
        for path, status, body in (("/readyz", 200, "ready"), ("/livez", 200, "alive")):
            response = await client.get(path)
            assert (response.status_code, response.json()) == (status, {"status": body}), path
        await router.begin_drain()
        draining = await client.get("/readyz")
        assert (draining.status_code, draining.json()) == (503, {"status": "draining"})
        health = await client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        assert health.json()["reasons"][0].startswith("draining")
        assert (await client.get("/livez")).status_code == 200


@pytest.mark.parametrize(("discovery", "routable"), [("static", False), ("eds", True)])
async def test_workers_count_towards_readiness_only_when_envoy_can_route_to_them(
        env: Env, capsys: pytest.CaptureFixture[str], discovery: str, routable: bool) -> None:
    # "code" has no ready config endpoint (code-1 serves another id): only the worker could
    # make it ready, and only EDS brings the worker to Envoy
    router_settings = env.config.router.model_copy(update={"endpoint_discovery": discovery})
    env.config = dataclasses.replace(env.config, router=router_settings)
    await env.start_router()
    spec = BackendSpec("cuda-01", ("Qwen/Qwen2.5-Coder-7B-Instruct",))
    async with SimulatedBackend(spec) as backend, httpx.AsyncClient(
            base_url=env.admin) as client:
        worker = {**WORKER, "runtime_endpoint": f"{backend.url}/v1"}
        assert (await client.post("/v1/workers", json=worker, headers=auth())).status_code == 201
        for _ in range(100):  # a registration is probed at once
            code = (await client.get("/health")).json()["models"]["code"]
            endpoint = next(e for e in code["endpoints"] if e["name"] == "cuda-01")
            if endpoint["last_probe"] is not None:
                break
            await asyncio.sleep(0.02)
        metrics = (await client.get("/metrics")).text
        assert await asyncio.to_thread(main, ["status", "--admin", env.admin]) == 0
    table = capsys.readouterr().out
    assert endpoint["last_probe"]["ok"]
    assert (code["ready"], endpoint["ready"], endpoint["routable"]) == (routable,) * 3
    assert f'semantic_router_model_ready{{model="code"}} {float(routable)}' in metrics
    assert f'semantic_router_model_ready_endpoints{{model="code"}} {float(routable)}' in metrics
    shown = "registered, but not routable with static discovery"
    assert (shown in endpoint["reason"]) is not routable
    assert (shown in table) is not routable


async def test_worker_api_auth_validation_and_lifecycle(env: Env) -> None:
    await env.start_router()
    worker = {**WORKER, "runtime_endpoint": f"http://127.0.0.1:{env.backends['general'].port}/v1"}
    async with httpx.AsyncClient(base_url=env.admin) as client:
        assert (await client.post("/v1/workers", json=worker)).status_code == 401
        wrong = await client.post("/v1/workers", json=worker, headers=auth("nope"))
        assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "unauthorized"
        assert TOKEN not in wrong.text

        secret = {**worker, "gpu_metadata": {"uuid": "GPU-3f8a1c2e-1b2d-4c5e-9f0a-1234567890ab"}}
        rejected = await client.post("/v1/workers", json=secret, headers=auth())
        assert rejected.status_code == 400
        error = rejected.json()["error"]
        assert error["param"] == "gpu_metadata.uuid" and error["code"] == "invalid_worker"
        assert "serial numbers and UUIDs" in error["message"]
        assert error["type"] == "invalid_request_error"
        broken = await client.post("/v1/workers", content=b"{", headers=auth())
        assert broken.status_code == 400 and broken.json()["error"]["code"] == "invalid_json"
        huge = await client.post("/v1/workers", content=b" " * 20_000, headers=auth())
        assert huge.status_code == 413

        created = await client.post("/v1/workers", json=worker, headers=auth())
        assert created.status_code == 201, created.text
        assert created.json()["models"] == ["code"]
        updated = await client.post("/v1/workers", json={**worker, "weight": 4}, headers=auth())
        assert updated.status_code == 200 and updated.json()["weight"] == 4
        listed = (await client.get("/v1/workers")).json()
        assert [w["worker_id"] for w in listed["data"]] == ["cuda-01"]
        assert (await client.get("/v1/workers/cuda-01")).json()["runtime"] == "cuda"
        assert (await client.delete("/v1/workers/cuda-01")).status_code == 401
        assert (await client.delete("/v1/workers/cuda-01", headers=auth())).status_code == 200
        missing = await client.get("/v1/workers/cuda-01")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "worker_not_found"


async def test_writes_refused_when_the_token_variable_is_unset(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SR_TEST_ADMIN_TOKEN")
    await env.start_router()
    async with httpx.AsyncClient(base_url=env.admin) as client:
        response = await client.post("/v1/workers", json=WORKER, headers=auth("x"))
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "admin_token_unset"


async def test_registrations_survive_a_restart(env: Env, tmp_path: Path) -> None:
    # not at general's config backend: that endpoint is taken (409 endpoint_in_use)
    worker = {**WORKER, "runtime_endpoint": f"http://127.0.0.1:{env.backends['code'].port}/v1",
              "supported_models": ["general"]}
    router = await env.start_router(tmp_path)
    async with httpx.AsyncClient(base_url=env.admin) as client:
        assert (await client.post("/v1/workers", json=worker, headers=auth())).status_code == 201
    await router.stop(0.5)
    await env.start_router(tmp_path)
    async with httpx.AsyncClient(base_url=env.admin) as client:
        listed = (await client.get("/v1/workers")).json()["data"]
        health = (await client.get("/health")).json()
    assert [w["worker_id"] for w in listed] == ["cuda-01"]
    endpoints = health["models"]["general"]["endpoints"]
    # static discovery: the worker is listed, but Envoy cannot route to it
    assert [(e["name"], e["source"], e["ready"], e["routable"]) for e in endpoints] == [
        ("general-1", "config", True, True), ("cuda-01", "worker", False, False)]
    assert "not routable with static discovery" in endpoints[1]["reason"]


async def _eds_request(call: Any, names: list[str], nonce: str = "", version: str = "",
                       error: str | None = None) -> None:
    request = DiscoveryRequest(version_info=version, resource_names=names, type_url=CLA_TYPE_URL,
                               response_nonce=nonce,
                               error_detail=Status(code=3, message=error) if error else None)
    await call.write(bytes(request))


async def _eds_read(call: Any, pending: Any = None
                    ) -> tuple[DiscoveryResponse, dict[str, list[tuple[Any, ...]]]]:
    response = DiscoveryResponse.parse(await asyncio.wait_for(pending or call.read(), 3))
    hosts = {}
    for resource in response.resources:
        cla = ClusterLoadAssignment.parse(resource.value)
        lb: list[Any] = [e for locality in cla.endpoints for e in locality.lb_endpoints]
        hosts[cla.cluster_name] = [
            (e.endpoint.address.socket_address.address,
             e.endpoint.address.socket_address.port_value, e.load_balancing_weight) for e in lb]
    return response, hosts


async def test_eds_push_ack_and_nack(env: Env) -> None:
    router = await env.start_router()
    general = env.backends["general"].port
    async with grpc.aio.insecure_channel(f"127.0.0.1:{router.grpc_port}") as channel:
        call = channel.stream_stream(f"/{EDS_SERVICE}/StreamEndpoints")()
        await _eds_request(call, ["general", "code"])
        first, hosts = await _eds_read(call)
        # only ready endpoints: "code" lists the wrong model id, so it has none
        assert hosts == {"general": [("127.0.0.1", general, 2)], "code": []}
        await _eds_request(call, ["general", "code"], first.nonce, first.version_info)  # ACK

        spec = BackendSpec("cuda-01", ("Qwen/Qwen2.5-Coder-7B-Instruct",))
        async with SimulatedBackend(spec) as backend, httpx.AsyncClient(
                base_url=env.admin) as client:
            worker = {**WORKER, "runtime_endpoint": f"{backend.url}/v1", "weight": 5}
            assert (await client.post("/v1/workers", json=worker, headers=auth())).status_code \
                == 201
            pushed, hosts = await _eds_read(call)
            assert int(pushed.version_info) > int(first.version_info)
            assert hosts["code"] == [("127.0.0.1", backend.port, 5)]
            # a NACK is logged and the rejected version is not sent again
            await _eds_request(call, ["general", "code"], pushed.nonce, first.version_info,
                               error="bad endpoint")
            pending = asyncio.ensure_future(call.read())  # cancelling a read ends the call
            done, _ = await asyncio.wait({pending}, timeout=0.5)
            assert not done
            assert (await client.delete("/v1/workers/cuda-01", headers=auth())).status_code \
                == 200
        _, hosts = await _eds_read(call, pending)
        assert hosts["code"] == []
        call.cancel()


async def test_status_command_and_validate_probe(env: Env, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    await env.start_router()
    assert await asyncio.to_thread(main, ["status", "--admin", env.admin]) == 0
    table = capsys.readouterr().out
    assert "router: ready" in table
    assert "lists [Qwen/Qwen2.5-Coder-7B] but not Qwen/Qwen2.5-Coder-7B-Instruct" in table
    assert await asyncio.to_thread(main, ["status", "--admin", env.admin, "--json"]) == 0
    assert '"status": "ready"' in capsys.readouterr().out
    assert await asyncio.to_thread(main, ["status", "--admin", "http://127.0.0.1:1"]) == 2

    path = tmp_path / "router.yaml"
    path.write_text(env.config.source.model_dump_json(by_alias=True, exclude_none=True))
    code = await asyncio.to_thread(main, ["config", "validate", "-c", str(path), "--probe"])
    err = capsys.readouterr().err
    assert code == 1
    assert ("providers.models[1].provider_model_id: 'Qwen/Qwen2.5-Coder-7B-Instruct' is not "
            "served by code-1") in err
    assert "general" not in err
