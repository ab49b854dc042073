"""docs/existing-mesh.md's snippets work as written: an operator's Envoy built from the
fragment, the doc's virtual host that switches the filters off, and the doc's command that
takes ``local_reply_config`` from the full render validates (``envoy --mode validate``); run
with the router down, the other host is answered untouched (no ext_proc, no Lua) while the
LLM host fails in OpenAI JSON."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from extproc.config import RouterConfig
from extproc.envoy_process import EnvoyProcess, validate_config
from extproc.envoy_render import fragment, to_yaml
from extproc.simulated_backend import BackendSpec, SimulatedBackend
from tests.dataplane.conftest import stack_config

pytestmark = pytest.mark.dataplane

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "existing-mesh.md"
HCM = ("type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
       "HttpConnectionManager")
ROUTER = {"name": "envoy.filters.http.router", "typed_config": {
    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}


def _block(language: str, containing: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)
    found = [b for b in blocks if containing in b]
    assert len(found) == 1, f"one ```{language} block with {containing!r} in {DOC}"
    return found[0]


def _local_reply_config(config_path: Path) -> dict[str, Any]:
    """Runs the doc's command, with this checkout's CLI and Python."""
    command = _block("sh", "local_reply_config").replace(
        "semantic-router ", f"{sys.executable} -m extproc.cli ").replace(
        "--config router.yaml", f"--config {config_path}").replace(
        "| python -c", f"| {sys.executable} -c")
    result = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = yaml.safe_load(result.stdout)
    assert set(document) == {"local_reply_config"}
    return document


def _operator_envoy(config: RouterConfig, config_path: Path, other_port: int) -> str:
    part = fragment(config)
    llm_host = part["virtual_host"]
    llm_host["domains"] = ["llm.example.com"]
    others = yaml.safe_load(_block("yaml", "ExtProcPerRoute"))["virtual_hosts"]
    listener_host, listener_port = config.listener.address.rsplit(":", 1)
    admin_host, admin_port = config.listener.admin.rsplit(":", 1)
    manager = {"@type": HCM, "stat_prefix": "mine",
               **_local_reply_config(config_path),
               "route_config": {"name": "mine", "virtual_hosts": [*others, llm_host]},
               "http_filters": [*part["http_filters"], ROUTER]}
    other_app = {"name": "other_app", "type": "STATIC", "connect_timeout": "1s",
                 "load_assignment": {"cluster_name": "other_app", "endpoints": [{
                     "lb_endpoints": [{"endpoint": {"address": {"socket_address": {
                         "address": "127.0.0.1", "port_value": other_port}}}}]}]}}
    return to_yaml({
        "admin": {"address": {"socket_address": {"address": admin_host,
                                                 "port_value": int(admin_port)}}},
        "static_resources": {
            "listeners": [{
                "name": "mine",
                "address": {"socket_address": {"address": listener_host,
                                               "port_value": int(listener_port)}},
                "per_connection_buffer_limit_bytes": config.listener.max_request_bytes + 65536,
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": manager}]}],
            }],
            "clusters": [*part["clusters"], other_app],
        },
    })


@pytest.mark.parametrize(("failure_mode", "llm_error"), [
    ("closed", "router_unavailable"),
    ("open", "upstream_unavailable"),  # past the router to the default model: not running
])
async def test_other_virtual_hosts_stay_untouched(tmp_path: Path, failure_mode: str,
                                                  llm_error: str) -> None:
    config, _ = stack_config(failure_mode)  # the router is never started
    config_path = tmp_path / "router.yaml"
    config_path.write_text(config.source.model_dump_json(by_alias=True, exclude_none=True))
    async with SimulatedBackend(BackendSpec("other-app", ("x",))) as other:
        text = await asyncio.to_thread(_operator_envoy, config, config_path, other.port)
        ok, output = await asyncio.to_thread(validate_config, text)
        assert ok, output
        envoy = EnvoyProcess(text, config.listener.admin, concurrency=1)
        envoy.start()
        try:
            await envoy.wait_ready()
            async with httpx.AsyncClient(base_url=f"http://{config.listener.address}",
                                         timeout=10) as client:
                mine = await client.get("/v1/models", headers={
                    "host": "app.example.com", "x-semantic-router-decision": "kept"})
                llm = await client.post("/v1/chat/completions", headers={
                    "host": "llm.example.com"}, json={"model": "auto", "messages": []})
        finally:
            envoy.stop()
    assert mine.status_code == 200  # ext_proc off: the router being down does not matter
    seen = other.requests[-1].headers
    assert "x-semantic-router-cluster" not in seen  # the Lua filter is off too
    assert seen["x-semantic-router-decision"] == "kept"
    assert llm.status_code >= 500
    assert llm.json()["error"]["code"] == llm_error  # local_reply_config
