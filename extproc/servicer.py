"""The gRPC edge: ``ExternalProcessor/Process`` over grpc.aio with raw bytes, plus
``grpc.health.v1``.

The servicer only dispatches: it reads each message through the adapter, hands it to the
stream's ``StreamProcessor`` and sends back bytes. Errors are mapped here, once: an unreadable
message ends the stream with INVALID_ARGUMENT (Envoy then applies its failure mode); an
unexpected bug answers that request with an OpenAI-style 500 and keeps the router alive.
A stream Envoy cancels (its message timeout fired, or the client went away) is counted as
``cancelled`` and logged once with the request id (null when unknown), the phase it was in
and its age; a router that stalled (:mod:`extproc.loop_stalls`) for about the message
timeout logs it as a warning with cause ``message_timeout``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer

from extproc import envoy_adapter as adapter
from extproc.context import RouterState
from extproc.envoy_adapter import Phase
from extproc.errors import error_body
from extproc.loop_stalls import StallMonitor
from extproc.names import EXT_PROC_SERVICE, IMMEDIATE_DETAILS
from extproc.processor import READ_HEADERS, StreamProcessor

_INTERNAL = adapter.immediate_response(
    500,
    error_body("the router failed to process this request", "server_error", None, "router_error"),
    {"content-type": "application/json"},
    IMMEDIATE_DETAILS,
)


_RESET_GRACE_S = 0.005
# A reset this far into the message timeout is Envoy's timeout firing (its clock starts when
# it sends the message, a little before the router reads it); sooner, the client went away.
_TIMEOUT_SHARE = 0.9


class StateHolder:
    """The current ``RouterState``; a reload swaps it in one assignment."""

    def __init__(self, state: RouterState) -> None:
        self.state = state


class ExtProcServicer:
    def __init__(self, holder: StateHolder, logger: logging.Logger,
                 stalls: StallMonitor | None = None) -> None:
        self._holder = holder
        self._logger = logger
        self._stalls = stalls

    async def process(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        state = self._holder.state
        processor = StreamProcessor(state, self._logger)
        status = "ok"
        started = time.perf_counter()
        opened = time.monotonic()  # the stall monitor's clock
        phase: Phase | None = None  # the message being answered; None between messages
        phase_started = started
        stream = requests.__aiter__()
        try:
            async for raw in stream:
                try:
                    message = adapter.parse_request(raw, READ_HEADERS)
                except adapter.AdapterError as err:
                    status = "invalid_message"
                    self._logger.warning("unreadable ext_proc message", extra={"error": str(err)})
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unreadable message")
                    return
                phase = message.phase
                phase_started = time.perf_counter()
                try:
                    response = await processor.handle(message)
                except Exception:
                    status = "internal_error"
                    self._logger.exception("request processing failed")
                    response = _INTERNAL
                    processor.finished = True
                phase = None
                yield response
                if processor.finished:
                    return  # end the call with OK rather than wait for Envoy's reset
            if not processor.finished:
                # The stream ended before the exchange did. A reset between messages ends
                # grpc.aio's request stream as a half-close does; its cancellation follows
                # from a separate completion: give it a moment to land here, to be counted
                # (only streams that end before their last answer wait for it).
                await asyncio.sleep(_RESET_GRACE_S)
        except (asyncio.CancelledError, GeneratorExit):
            if not processor.finished:  # Envoy may reset as soon as it has the last answer
                status = "cancelled"
                now = time.perf_counter()
                timeout_s = state.config.router.message_timeout_ms / 1000
                # Envoy may have opened the stream up to a message timeout before the router,
                # stalled, got to it: a stall ending in that window can explain its reset.
                stalled = (self._stalls.stalled_s(opened - timeout_s)
                           if self._stalls is not None else 0.0)
                self._log_cancelled(processor, phase, now - started, now - phase_started,
                                    timeout_s, stalled)
            raise
        finally:
            state.metrics.stream_ended(status)
            # grpc.aio reads through an async generator; left open when we end the call
            # ourselves, it is finalized by the event loop's hook, which costs a self-pipe
            # write and an aclose() task per request. Closing it here is the same, inline.
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

    def _log_cancelled(
        self, processor: StreamProcessor, phase: Phase | None, elapsed_s: float,
        answering_s: float, message_timeout_s: float, stalled_s: float = 0.0,
    ) -> None:
        """A warning with cause ``message_timeout`` when Envoy gave up on the router: it was
        answering a message for about the message timeout, or its event loop stalled that
        long (a blocked loop, a stopped process) while the stream was open, so Envoy's timer
        fired whatever the phase (Envoy answered the client itself, usually 504). Info with
        ``downstream_reset`` otherwise (the client went away and Envoy reset the stream).
        ``request_id`` is null when no headers message was read. Never the request's content
        or headers but its id."""
        limit = _TIMEOUT_SHARE * message_timeout_s
        timed_out = (phase is not None and answering_s >= limit) or stalled_s >= limit
        extra: dict[str, object] = {
            "request_id": processor.request_id or None,
            "phase": phase.value if phase is not None else "between_messages",
            "cause": "message_timeout" if timed_out else "downstream_reset",
            "elapsed_ms": round(elapsed_s * 1000, 1)}
        if stalled_s >= limit:
            extra["loop_stalled_ms"] = round(stalled_s * 1000, 1)
        self._logger.log(logging.WARNING if timed_out else logging.INFO, "stream cancelled",
                         extra=extra)

    def handler(self) -> grpc.GenericRpcHandler:
        method = grpc.stream_stream_rpc_method_handler(self.process)  # raw bytes both ways
        return grpc.method_handlers_generic_handler(EXT_PROC_SERVICE, {"Process": method})


async def start_grpc_server(
    address: str,
    servicer: ExtProcServicer,
    max_message_bytes: int,
    extra_handlers: tuple[grpc.GenericRpcHandler, ...] = (),
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, HealthServicer, int]:
    """Start the server; returns it, its health servicer (NOT_SERVING until the caller marks
    it ready) and the bound port. ``extra_handlers`` (e.g. EDS) are served alongside;
    ``credentials`` serve TLS instead of plaintext."""
    # On HTTP/2 Envoy buffers a body without a content-length up to twice the stream's
    # limit before it refuses it itself; such a body must reach the processor (413 in
    # JSON), not fail here as an oversized gRPC message (a 500 naming the router).
    limit = 2 * max_message_bytes + 1024 * 1024
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers((servicer.handler(), *extra_handlers))
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    if credentials is not None:
        port = server.add_secure_port(address, credentials)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"cannot bind the gRPC server to {address}")
    await health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    await health.set(EXT_PROC_SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    return server, health, port


async def mark_serving(health: HealthServicer, serving: bool) -> None:
    status = (
        health_pb2.HealthCheckResponse.SERVING
        if serving
        else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    await health.set("", status)
    await health.set(EXT_PROC_SERVICE, status)
