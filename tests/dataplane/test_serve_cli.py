"""`semantic-router serve --with-envoy` as a user runs it: a real process that starts the
router and the bundled Envoy, routes through the listener, and stops both on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from extproc.localnet import free_port
from extproc.simulated_backend import BackendSpec, SimulatedBackend

pytestmark = pytest.mark.dataplane


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_serve_with_envoy_routes_and_stops_cleanly(tmp_path: Path) -> None:
    ports = {k: free_port() for k in ("listener", "envoy_admin", "grpc", "admin", "backend")}
    config = tmp_path / "router.yaml"
    config.write_text(f"""
listener: {{address: "127.0.0.1:{ports['listener']}", admin: "127.0.0.1:{ports['envoy_admin']}"}}
router: {{grpc: "127.0.0.1:{ports['grpc']}", admin: "127.0.0.1:{ports['admin']}"}}
providers:
  defaults: {{model: general}}
  models:
    - name: general
      provider_model_id: Qwen/Qwen3-0.6B
      backend_refs: [{{name: sim-1, endpoint: "127.0.0.1:{ports['backend']}"}}]
""")
    backend = SimulatedBackend(BackendSpec("sim-1", ("Qwen/Qwen3-0.6B",), port=ports["backend"]))
    await backend.start()
    process = subprocess.Popen(
        [sys.executable, "-m", "extproc.cli", "serve", "--config", str(config), "--with-envoy"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ},
    )
    try:
        base = f"http://127.0.0.1:{ports['listener']}"
        deadline = time.monotonic() + 60
        response = None
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            while time.monotonic() < deadline and process.poll() is None:
                try:
                    response = await client.post("/v1/chat/completions", json={
                        "model": "auto", "messages": [{"role": "user", "content": "hi"}]})
                    break
                except httpx.TransportError:
                    await asyncio.sleep(0.3)
        assert response is not None, "router + Envoy never answered"
        assert response.status_code == 200
        assert response.headers["x-semantic-router-model"] == "general"
        assert backend.requests[-1].body["model"] == "Qwen/Qwen3-0.6B"  # type: ignore[index]
        process.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(process.communicate, timeout=30)
        assert process.returncode == 0, output.decode(errors="replace")[-3000:]
        assert not _listening(ports["listener"])  # Envoy went with it
        assert not _listening(ports["grpc"])
        lines = [json.loads(line) for line in output.decode().splitlines()
                 if line.startswith("{")]
        assert any(line.get("msg") == "router ready" for line in lines)
        assert any(line.get("msg") == "envoy ready" for line in lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        await backend.stop()
