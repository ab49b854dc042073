"""Processes and configs for bench/overhead.py: the fake vLLM backend, front Envoys, the null
ext_proc and router subprocesses, and /proc readers for their CPU time and memory.

The backend is an Envoy ``direct_response`` listener (a fixed OpenAI chat.completion for every
POST, a model list for ``GET /v1/models`` so the router's probes pass): a few µs of C++ per
request, so it cannot be the bottleneck (the bench prints its CPU per request to show it).
Every port comes from ``extproc.localnet.free_port`` (loopback, below 32768).
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extproc.config import RouterConfig, load_config
from extproc.envoy_process import EnvoyProcess
from extproc.envoy_render import LISTENER_NAME, bootstrap, to_yaml
from extproc.localnet import free_port

REPO = Path(__file__).resolve().parent.parent
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# The request mix: short chat prompts; some hit the code or math keywords, some hit nothing.
PROMPTS = (
    "Write a Python function that merges two sorted lists.",
    "What is the derivative of x^3 * sin(x)? Show the steps.",
    "Suggest three friendly names for a neighbourhood bakery.",
    "My SQL query returns duplicate rows after a join; how do I fix it?",
    "Prove that the square root of two is irrational.",
    "Summarise the causes of the French Revolution in three sentences.",
    "Explain what a stack trace is and how to read one.",
    "Plan a two-day trip to Lisbon on a small budget.",
)

KEYWORD_CONFIG: dict[str, Any] = {
    "router": {"auto_model_names": ["auto"]},
    "providers": {
        "defaults": {"model": "general"},
        "models": [
            {"name": "general", "provider_model_id": "Qwen/Qwen3-0.6B"},
            {"name": "reasoning", "provider_model_id": "Qwen/Qwen3-8B"},
            {"name": "code", "provider_model_id": "Qwen/Qwen2.5-Coder-7B-Instruct"},
        ],
    },
    "signals": [
        {"name": "code_keywords", "type": "keyword",
         "keywords": ["python", "javascript", "rust", "function", "stack trace", "sql", "bug"]},
        {"name": "math_keywords", "type": "keyword",
         "keywords": ["integral", "derivative", "equation", "theorem", "prove", "probability"]},
    ],
    "decisions": [
        {"name": "code", "priority": 20, "rules": {"signal": "code_keywords"}, "model": "code"},
        {"name": "reasoning", "priority": 10, "rules": {"signal": "math_keywords"},
         "model": "reasoning"},
    ],
}


def classifier_config() -> dict[str, Any]:
    """The keyword config plus a ``domain`` signal on the bundled default head, referenced by
    the highest-priority decisions, so every auto request runs the encoder."""
    config = copy.deepcopy(KEYWORD_CONFIG)
    config["signals"].append({"name": "domain", "type": "domain"})
    config["decisions"][:0] = [
        {"name": "domain_code", "priority": 40,
         "rules": {"signal": "domain", "label": "computer science"}, "model": "code"},
        {"name": "domain_math", "priority": 30,
         "rules": {"signal": "domain", "label": "math"}, "model": "reasoning"},
    ]
    return config


def chat_body(model: str, prompt: str) -> bytes:
    return json.dumps({
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": prompt},
        ],
        "max_tokens": 64,
        "temperature": 0.2,
    }).encode()


# --- /proc ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


# --- the fake vLLM backend ----------------------------------------------------------------------


def backend_bootstrap(port: int, admin_port: int, model_ids: list[str]) -> dict[str, Any]:
    completion = {
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000,
        "model": "bench", "choices": [{
            "index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "This is a fixed benchmark answer."},
        }],
        "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
    }
    models = {"object": "list", "data": [
        {"id": m, "object": "model", "created": 1700000000, "owned_by": "bench"}
        for m in model_ids
    ]}

    def answer(prefix: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"match": {"prefix": prefix},
                "direct_response": {"status": 200, "body": {"inline_string": json.dumps(body)}}}

    manager = {
        "@type": "type.googleapis.com/envoy.extensions.filters.network."
                 "http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "backend",
        "route_config": {"virtual_hosts": [{
            "name": "backend", "domains": ["*"],
            "routes": [answer("/v1/models", models), answer("/", completion)],
            "response_headers_to_add": [
                {"header": {"key": "content-type", "value": "application/json"}}],
        }]},
        "http_filters": [
            # Read the whole request before answering, as vLLM does: a direct_response sent
            # while a POST body is still arriving makes Envoy close the connection, and the
            # front Envoy would then open a new upstream connection for every request.
            {"name": "envoy.filters.http.buffer", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer",
                "max_request_bytes": 16 * 1024 * 1024}},
            {"name": "envoy.filters.http.router", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}},
        ],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1",
                                                 "port_value": admin_port}}},
        "static_resources": {"listeners": [{
            "name": "backend",
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [{
                "name": "envoy.filters.network.http_connection_manager", "typed_config": manager,
            }]}],
        }]},
    }


# --- router configs and front Envoys -------------------------------------------------------------


@dataclass(frozen=True)
class Ports:
    listener: int
    envoy_admin: int
    grpc: int
    admin: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port())


def write_router_config(
    document: dict[str, Any], ports: Ports, backend_port: int, path: Path
) -> RouterConfig:
    """``document`` with bench addresses: every model's only endpoint is the fake backend."""
    data = copy.deepcopy(document)
    data["listener"] = {**data.get("listener", {}), "address": f"127.0.0.1:{ports.listener}",
                        "admin": f"127.0.0.1:{ports.envoy_admin}"}
    data["router"] = {**data.get("router", {}), "grpc": f"127.0.0.1:{ports.grpc}",
                      "admin": f"127.0.0.1:{ports.admin}"}
    for index, model in enumerate(data["providers"]["models"]):
        model["backend_refs"] = [{"name": f"bench-{index}", "endpoint": f"127.0.0.1:{backend_port}",
                                  "protocol": "http", "weight": 1}]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_config(path)


def without_extproc(document: dict[str, Any], default_cluster: str) -> dict[str, Any]:
    """The rendered bootstrap with no Lua and no ext_proc filter; the route goes straight to
    the default model's cluster. Everything else (access log, clusters) stays as rendered."""
    data = copy.deepcopy(document)
    for listener in data["static_resources"]["listeners"]:
        if listener["name"] != LISTENER_NAME:
            continue
        manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
        manager["http_filters"] = manager["http_filters"][-1:]  # the router filter
        for host in manager["route_config"]["virtual_hosts"]:
            for route in host["routes"]:
                route["route"].pop("cluster_header", None)
                route["route"]["cluster"] = default_cluster
    return data


def envoy_pid(envoy: EnvoyProcess) -> int:
    process = envoy._process  # EnvoyProcess exposes no pid; the bench reads its /proc
    if process is None:
        raise RuntimeError("Envoy is not running")
    return process.pid


def start_envoy(document: dict[str, Any], admin_port: int, concurrency: int,
                log_path: Path) -> EnvoyProcess:
    envoy = EnvoyProcess(to_yaml(document), f"127.0.0.1:{admin_port}",
                         concurrency=concurrency, log_path=log_path)
    envoy.start()
    return envoy


def front_envoy(config: RouterConfig, grpc_address: str | None, concurrency: int,
                log_path: Path) -> EnvoyProcess:
    """The rendered bootstrap, wired to ``grpc_address``; None: no ext_proc at all."""
    document = bootstrap(config, grpc_address=grpc_address)
    if grpc_address is None:
        document = without_extproc(document, config.default_model.cluster)
    admin_port = int(config.listener.admin.rpartition(":")[2])
    return start_envoy(document, admin_port, concurrency, log_path)


# --- child processes ----------------------------------------------------------------------------


class Child:
    """A subprocess whose output goes to a file (never a pipe that could fill up)."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.log_path = log_path
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        with log_path.open("ab") as log:
            self._process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                             cwd=REPO)

    @property
    def pid(self) -> int:
        return self._process.pid

    def logs(self, tail: int = 40) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-tail:])

    def check_alive(self) -> None:
        if self._process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self._process.returncode}:\n"
                               + self.logs())

    async def wait_port(self, port: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return
            except OSError:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.name} not listening on {port} after {timeout_s}s")

    async def wait_http_ok(self, url: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check_alive()
            if await asyncio.to_thread(http_status, url) == 200:
                return
            await asyncio.sleep(0.25)
        raise RuntimeError(f"{self.name}: {url} not 200 after {timeout_s}s:\n{self.logs()}")

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)


def null_extproc(port: int, cluster: str, log_path: Path) -> Child:
    script = str(REPO / "bench" / "null_extproc.py")
    argv = [sys.executable, script, "--address", f"127.0.0.1:{port}", "--cluster", cluster]
    return Child("null ext_proc", argv, log_path)


def router(config_path: Path, log_level: str, log_path: Path) -> Child:
    binary = Path(sys.executable).parent / "semantic-router"
    argv = [str(binary), "serve", "--config", str(config_path), "--log-level", log_level]
    return Child("router", argv, log_path)


def http_status(url: str, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=body, method="POST" if body else "GET",
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def post(url: str, body: bytes) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
            return int(response.status), {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as err:
        return err.code, {}
    except OSError:
        return 0, {}


def scrape(url: str) -> dict[str, float]:
    """Prometheus text exposition -> {"name{labels}": value} (no timestamps, no comments)."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
