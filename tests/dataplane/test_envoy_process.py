"""The bundled Envoy's process contract: ``wait_ready`` trusts only our own Envoy (another
process answering on the admin port, or an Envoy left over on the listener port, fails
start-up in one line), ``drain`` reports the downstream requests still active."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc

from extproc.envoy_process import EnvoyError, EnvoyProcess, active_requests, describe_exit
from extproc.envoy_render import bootstrap, to_yaml
from extproc.localnet import free_port
from extproc.server import bundled_envoy, drain_and_stop, with_ports
from tests.dataplane.conftest import stack_config, start_stack, stop_stack, stream_and_stop

pytestmark = pytest.mark.dataplane


@pytest.fixture
async def impostor_admin() -> AsyncIterator[int]:
    """Something else on the admin port that says it is ready (an old Envoy, say)."""
    async def ready(_: web.Request) -> web.Response:
        return web.Response(text="LIVE\n")

    app = web.Application()
    app.router.add_get("/ready", ready)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield port
    await runner.cleanup()


async def test_wait_ready_is_not_fooled_by_another_admin_on_the_port(impostor_admin: int) -> None:
    config, _ = stack_config()
    config = with_ports(config, config.listener.address, f"127.0.0.1:{impostor_admin}")
    envoy = EnvoyProcess(to_yaml(bootstrap(config)), config.listener.admin, concurrency=1)
    assert await _start_error(envoy) == (f"Envoy exited with code 1 during start-up: cannot "
                                         f"bind '127.0.0.1:{impostor_admin}': Address already "
                                         f"in use")


async def test_the_bundled_envoy_does_not_share_its_listener_port() -> None:
    # An Envoy left over from a killed router, rendered as Envoy defaults (SO_REUSEPORT):
    # a second Envoy with reuse_port could bind the same listener and split the traffic.
    config, _ = stack_config()
    leftover = EnvoyProcess(to_yaml(bootstrap(config)), config.listener.admin, concurrency=1)
    leftover.start()
    await leftover.wait_ready()
    fresh = with_ports(config, config.listener.address, f"127.0.0.1:{free_port()}")
    try:
        error = await _start_error(bundled_envoy(fresh, config.router.grpc))
    finally:
        leftover.stop()
    assert f"cannot bind '{config.listener.address}': Address already in use" in error
    assert "\n" not in error


async def test_drain_and_stop_waits_for_streams_through_envoy() -> None:
    config, _ = stack_config()
    stack = await start_stack(config)
    router = stack.router
    assert router is not None

    async def draining_while_envoy_waits() -> None:
        await asyncio.sleep(0.2)
        assert router.readiness() == (False, "draining")
        assert await _grpc_health(router.grpc_address) == \
            health_pb2.HealthCheckResponse.NOT_SERVING
        assert stack.envoy.returncode is None  # Envoy waits for us

    try:
        chunks = await stream_and_stop(
            stack, 0.3, lambda: drain_and_stop(router, stack.envoy, grace_s=10),
            draining_while_envoy_waits)
        assert chunks[-1] == "data: [DONE]" and len(chunks) >= 8
        assert stack.envoy.returncode is not None  # stopped last
    finally:
        stack.router = None
        await stop_stack(stack)


async def _start_error(envoy: EnvoyProcess) -> str:
    """The one-line error ``envoy`` fails its start-up with (it must fail)."""
    envoy.start()
    try:
        with pytest.raises(EnvoyError) as info:
            await envoy.wait_ready(timeout_s=15)
    finally:
        envoy.stop()
    return str(info.value)


async def _grpc_health(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5)
    return int(reply.status)


async def test_drain_of_an_idle_or_gone_envoy() -> None:
    config, _ = stack_config()
    stack = await start_stack(config, with_router=False)
    try:
        assert await asyncio.wait_for(stack.envoy.drain(5), 3) == 0
    finally:
        await stop_stack(stack)
    assert await stack.envoy.drain(5) is None  # stopped: nothing to drain
    never = EnvoyProcess("{}", "127.0.0.1:1")
    assert await never.drain(5) is None
    never.stop()


def test_active_requests_and_exit_descriptions() -> None:
    stats = ("http.admin.downstream_rq_active: 1\n"  # the stats request itself
             "http.semantic_router.downstream_rq_active: 2\n"
             "http.other.downstream_rq_active: 1\n"
             "listener.admin.downstream_cx_active: 1\n")
    assert active_requests(stats) == 3
    assert describe_exit(1) == "exited with code 1"
    assert describe_exit(-9) == "was killed by SIGKILL"
