"""`semantic-router serve --with-envoy` as a user runs it: a real process that starts the
router and the bundled Envoy, routes through the listener, and stops both on SIGTERM after
the SSE streams in flight finish (bounded by the grace); SIGHUP reloads; an Envoy that dies
stops the router, a killed router takes its Envoy along, a taken port fails in one line."""

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

from extproc.simulated_backend import BackendSpec, SimulatedBackend
from tests.dataplane.serve_support import ServeProcess, alive, serve_ports, write_config

pytestmark = pytest.mark.dataplane


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def test_serve_with_envoy_routes_and_stops_cleanly(tmp_path: Path) -> None:
    ports = serve_ports()
    config = write_config(tmp_path / "router.yaml", ports)
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


async def _stream(base: str, chunks: list[str], errors: list[str]) -> None:
    body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client, client.stream(
                "POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    chunks.append(line)
    except httpx.HTTPError as err:
        errors.append(repr(err))


async def _started_stream(base: str) -> tuple[asyncio.Task[None], list[str], list[str]]:
    chunks: list[str] = []
    errors: list[str] = []
    task = asyncio.create_task(_stream(base, chunks, errors))
    deadline = time.monotonic() + 10
    while not chunks and not task.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert chunks, errors
    return task, chunks, errors


async def test_sigterm_lets_sse_streams_through_envoy_finish(tmp_path: Path) -> None:
    ports = serve_ports()
    config = write_config(tmp_path / "router.yaml", ports, grace=10)
    spec = BackendSpec("sim-1", ("Qwen/Qwen3-0.6B",), port=ports["backend"],
                       stream_delay_s=0.25, stream_chunks=8)  # about 2.5 s per stream
    async with SimulatedBackend(spec):
        serve = ServeProcess(config, "--with-envoy")
        try:
            await serve.wait_envoy_ready()
            base = f"http://127.0.0.1:{ports['listener']}"
            task, chunks, errors = await _started_stream(base)
            signalled = time.monotonic()
            serve.signal(signal.SIGTERM)
            await serve.wait_log("draining", 10)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{ports['admin']}") as admin:
                ready, health, live = [await admin.get(p) for p in ("/readyz", "/health",
                                                                      "/livez")]
            assert (ready.status_code, ready.json()) == (503, {"status": "draining"})
            assert (health.status_code, health.json()["status"]) == (503, "draining")
            assert live.status_code == 200
            assert not task.done()  # still streaming while the router reports not ready
            await asyncio.wait_for(task, 15)
            assert errors == [] and chunks[-1] == "data: [DONE]", (chunks, errors)
            assert len(chunks) >= 10  # role, 8 pieces, finish, [DONE]
            assert await serve.wait_exit(15) == 0, serve.output()[-3000:]
            assert time.monotonic() - signalled < 10 + 5  # the grace plus a small margin
            drained = await serve.wait_log("envoy drained", 1)
            assert drained["active_requests"] == 0
            assert not _listening(ports["listener"]) and not alive(serve.envoy_pid or 0)
        finally:
            serve.close()


async def test_drain_gives_up_after_the_grace(tmp_path: Path) -> None:
    ports = serve_ports()
    config = write_config(tmp_path / "router.yaml", ports, grace=1)
    spec = BackendSpec("sim-1", ("Qwen/Qwen3-0.6B",), port=ports["backend"],
                       stream_delay_s=0.5, stream_chunks=20)  # about 10 s: longer than 1 s
    async with SimulatedBackend(spec):
        serve = ServeProcess(config, "--with-envoy")
        try:
            await serve.wait_envoy_ready()
            task, _, _ = await _started_stream(f"http://127.0.0.1:{ports['listener']}")
            signalled = time.monotonic()
            serve.signal(signal.SIGTERM)
            assert await serve.wait_exit(15) == 0, serve.output()[-3000:]
            assert time.monotonic() - signalled < 1 + 4
            incomplete = await serve.wait_log("envoy drain incomplete", 1)
            assert incomplete["active_requests"] >= 1
            await asyncio.wait_for(task, 5)  # cut, but not left hanging
        finally:
            serve.close()


async def test_sighup_reloads_the_config_and_keeps_serving(tmp_path: Path) -> None:
    ports = serve_ports()
    config = write_config(tmp_path / "router.yaml", ports)
    async with SimulatedBackend(BackendSpec("sim-1", ("Qwen/Qwen3-0.6B",),
                                            port=ports["backend"])):
        serve = ServeProcess(config, "--with-envoy")
        try:
            await serve.wait_envoy_ready()
            serve.signal(signal.SIGHUP)
            reloaded = await serve.wait_log("config reloaded", 10)
            assert reloaded["trigger"] == "SIGHUP"
            assert serve.process.poll() is None and alive(serve.envoy_pid or 0)
            async with httpx.AsyncClient(timeout=5) as client:
                response = await client.post(
                    f"http://127.0.0.1:{ports['listener']}/v1/chat/completions",
                    json={"model": "auto", "messages": [{"role": "user", "content": "hi"}]})
            assert response.status_code == 200
            serve.signal(signal.SIGTERM)
            assert await serve.wait_exit(15) == 0, serve.output()[-3000:]
        finally:
            serve.close()


async def test_router_stops_with_an_error_when_its_envoy_dies(tmp_path: Path) -> None:
    ports = serve_ports()
    serve = ServeProcess(write_config(tmp_path / "router.yaml", ports), "--with-envoy")
    try:
        envoy = await serve.wait_envoy_ready()
        os.kill(envoy, signal.SIGKILL)
        assert await serve.wait_exit(15) == 1, serve.output()[-3000:]
        died = await serve.wait_log("envoy exited unexpectedly; stopping the router", 1)
        assert died["exit_code"] == -signal.SIGKILL
        assert ("error: the bundled Envoy was killed by SIGKILL unexpectedly; the router "
                "stopped too") in serve.lines
        assert "Traceback" not in serve.output()
        assert not _listening(ports["grpc"]) and not _listening(ports["admin"])
    finally:
        serve.close()


async def test_envoy_does_not_outlive_a_killed_router(tmp_path: Path) -> None:
    serve = ServeProcess(write_config(tmp_path / "router.yaml", serve_ports()), "--with-envoy")
    try:
        envoy = await serve.wait_envoy_ready()
        serve.signal(signal.SIGKILL)  # no chance to stop Envoy itself
        await serve.wait_exit(5)
        deadline = time.monotonic() + 10
        while alive(envoy) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not alive(envoy), "Envoy outlived its router"
    finally:
        serve.close()


@pytest.mark.parametrize("taken", ["listener", "envoy_admin"])
async def test_a_taken_envoy_port_fails_start_up_in_one_line(tmp_path: Path, taken: str) -> None:
    ports = serve_ports()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports[taken]))
        holder.listen()
        serve = ServeProcess(write_config(tmp_path / "router.yaml", ports), "--with-envoy")
        try:
            assert await serve.wait_exit(30) == 1
        finally:
            serve.close()
    errors = [line for line in serve.lines if line.startswith("error:")]
    assert errors == [f"error: Envoy exited with code 1 during start-up: cannot bind "
                      f"'127.0.0.1:{ports[taken]}': Address already in use"], serve.output()
    assert "Traceback" not in serve.output()
    assert not _listening(ports["grpc"])  # the router stopped again
