"""Real Envoy in EDS mode: a worker registered at runtime takes traffic within 2 s, a deleted
one stops taking it, without restarting Envoy; every rendered config validates."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from extproc.config import RouterConfig, load_config_text
from extproc.envoy_process import validate_config
from extproc.envoy_render import bootstrap, fragment, to_yaml
from extproc.localnet import free_port
from extproc.simulated_backend import BackendSpec, SimulatedBackend
from tests.dataplane.conftest import start_stack, stop_stack

pytestmark = pytest.mark.dataplane
EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "workers-eds.yaml"

CONFIG = """
listener: {{address: "127.0.0.1:{listener}", admin: "127.0.0.1:{envoy_admin}"}}
router:
  grpc: "127.0.0.1:{grpc}"
  admin: "127.0.0.1:{admin}"
  endpoint_discovery: eds
  probe: {{interval_s: 0.5, timeout_s: 1}}
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: general-1, endpoint: "127.0.0.1:{general}", weight: 1}}]
    - name: code
      provider_model_id: Qwen/Qwen2.5-Coder-7B-Instruct
      backend_refs: [{{name: code-1, endpoint: "127.0.0.1:{code}"}}]
"""


def eds_config() -> RouterConfig:
    ports = {n: free_port() for n in ("listener", "envoy_admin", "grpc", "admin", "general",
                                      "code")}
    return load_config_text(CONFIG.format(**ports))


def test_eds_render_validates() -> None:
    config = eds_config()
    document = bootstrap(config)
    ok, output = validate_config(to_yaml(document))
    assert ok, output
    cluster = next(c for c in document["static_resources"]["clusters"] if c["name"] == "general")
    assert cluster["type"] == "EDS" and "load_assignment" not in cluster
    assert cluster["eds_cluster_config"]["service_name"] == "general"
    assert cluster["health_checks"][0]["http_health_check"]["path"] == "/health"
    assert cluster["ignore_health_on_host_removal"] is True
    part = fragment(config)
    assert {c["name"] for c in part["clusters"]} >= {"general", "code"}


@pytest.mark.parametrize("discovery", ["eds", "static"])
def test_example_config_renders_in_both_modes(discovery: str) -> None:
    text = EXAMPLE.read_text().replace("endpoint_discovery: eds",
                                       f"endpoint_discovery: {discovery}")
    config = load_config_text(text)
    document = bootstrap(config)
    ok, output = validate_config(to_yaml(document))
    assert ok, output
    acme = next(c for c in document["static_resources"]["clusters"] if c["name"] == "acme")
    if discovery == "static":  # config workers join the static endpoints
        ports = [e["endpoint"]["address"]["socket_address"]["port_value"]
                 for e in acme["load_assignment"]["endpoints"][0]["lb_endpoints"]]
        assert ports == [8001, 8002]
    else:
        assert acme["type"] == "EDS"


async def _backend_of(client: httpx.AsyncClient) -> str:
    body = {"model": "general", "messages": [{"role": "user", "content": "hi"}]}
    response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.headers["x-backend-id"]


async def test_registered_worker_gets_traffic_and_deleted_one_stops() -> None:
    config = eds_config()
    stack = await start_stack(config)
    worker = SimulatedBackend(BackendSpec("worker-1", ("Qwen/Qwen3-0.6B",), record_probes=False))
    await worker.start()
    assert stack.router is not None
    admin = f"http://127.0.0.1:{stack.router.admin_port}"
    try:
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=5) as client:
            assert {await _backend_of(client) for _ in range(4)} == {"general-1"}
            registration = {
                "worker_id": "worker-1", "worker_type": "nvidia-gpu", "runtime": "cuda",
                "runtime_endpoint": f"http://127.0.0.1:{worker.port}/v1",
                "supported_models": ["general"], "runtime_config": {"transport": "openai"},
                "gpu_metadata": {"product": "operator-reported"},
            }
            started = time.monotonic()
            posted = await client.post(f"{admin}/v1/workers", json=registration)
            assert posted.status_code == 201, posted.text
            while await _backend_of(client) != "worker-1":
                assert time.monotonic() - started < 2.0, "worker got no traffic within 2 s"
                await asyncio.sleep(0.05)
            assert (await client.delete(f"{admin}/v1/workers/worker-1")).status_code == 200
            await asyncio.sleep(0.3)  # the EDS push reaches Envoy within milliseconds
            served = len(worker.requests)
            assert {await _backend_of(client) for _ in range(6)} == {"general-1"}
            assert len(worker.requests) == served
    except BaseException:
        print("---- envoy log ----\n" + stack.envoy.logs(100))
        raise
    finally:
        await worker.stop()
        await stop_stack(stack)
