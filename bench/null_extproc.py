"""Null ext_proc: the floor for a Python (grpc.aio) external processor.

Answers every ``ProcessingRequest`` with pre-serialized bytes and does nothing else: request
and response headers get a plain CONTINUE, the request body gets one cached response that sets
the default cluster header and clears the route cache (what the router's body response does,
less the body rewrite). It also serves grpc.health.v1 (SERVING), which the rendered ext_proc
cluster health-checks. Same server options as the router's (raw bytes, no serializers), so the
difference to the router is the router's own work per message.

Run: ``python bench/null_extproc.py --address 127.0.0.1:PORT --cluster general``. Used by
``bench/overhead.py``; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterator
from typing import Any, Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from extproc.envoy_adapter import Mutations, Phase, continue_response, parse_request
from extproc.names import CLUSTER_HEADER, EXT_PROC_SERVICE

# ProcessingRequest oneof field numbers (envoy-data-plane 2.2). Envoy serializes fields in
# number order and never sets the deprecated async_mode (1), so the first byte of a message is
# the tag of its phase: (field << 3) | LEN. Checked against the adapter at start-up.
_REQUEST_FIELDS: Final = {
    Phase.REQUEST_HEADERS: 2,
    Phase.RESPONSE_HEADERS: 3,
    Phase.REQUEST_BODY: 4,
    Phase.RESPONSE_BODY: 5,
    Phase.REQUEST_TRAILERS: 6,
    Phase.RESPONSE_TRAILERS: 7,
}
_MAX_MESSAGE: Final = 8 * 1024 * 1024 + 64 * 1024  # the router's default body cap + framing


def answers(cluster: str) -> dict[int, bytes]:
    """First byte of a request -> the response bytes for its phase."""
    table: dict[int, bytes] = {}
    for phase, number in _REQUEST_FIELDS.items():
        tag = (number << 3) | 2
        if parse_request(bytes([tag, 0])).phase is not phase:
            raise SystemExit(f"field number of {phase.value} disagrees with the adapter")
        table[tag] = continue_response(phase)
    body_tag = (_REQUEST_FIELDS[Phase.REQUEST_BODY] << 3) | 2
    table[body_tag] = continue_response(
        Phase.REQUEST_BODY, Mutations(set_headers={CLUSTER_HEADER: cluster}, clear_route_cache=True)
    )
    return table


class NullProcessor:
    def __init__(self, cluster: str) -> None:
        self._answers = answers(cluster)

    async def process(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        table = self._answers
        async for raw in requests:
            answer = table.get(raw[0]) if raw else None
            if answer is None:  # not seen from Envoy; answered correctly all the same
                answer = continue_response(parse_request(raw).phase)
            yield answer


async def serve(address: str, cluster: str) -> None:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", _MAX_MESSAGE),
            ("grpc.max_send_message_length", _MAX_MESSAGE),
            ("grpc.so_reuseport", 0),
        ]
    )
    method = grpc.stream_stream_rpc_method_handler(NullProcessor(cluster).process)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(EXT_PROC_SERVICE, {"Process": method}),)
    )
    # grpc.health.v1 as the router serves it: the rendered ext_proc cluster health-checks it
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    for service in ("", EXT_PROC_SERVICE):
        await health.set(service, health_pb2.HealthCheckResponse.SERVING)
    if server.add_insecure_port(address) == 0:
        raise SystemExit(f"cannot bind {address}")
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--address", required=True, help="host:port to listen on")
    parser.add_argument("--cluster", required=True, help="default cluster header value")
    args = parser.parse_args()
    asyncio.run(serve(args.address, args.cluster))


if __name__ == "__main__":
    main()
