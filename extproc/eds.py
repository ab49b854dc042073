"""Envoy's EDS, state of the world: ``EndpointDiscoveryService/StreamEndpoints`` served on the
router's grpc.aio server, so registered workers take traffic without restarting Envoy.

The only module that reads or builds xDS protos (envoy-data-plane messages, off the hot path).

Contracts (verified against Envoy 1.40, see ARCHITECTURE.md):

* Each response carries a ``ClusterLoadAssignment`` (Any-packed) for every cluster the stream
  asked for that the table knows, under the table's version; the nonce is new per response.
* A request whose ``response_nonce`` matches our last response and has no ``error_detail`` is
  an ACK (nothing to send); with ``error_detail`` it is a NACK: logged, and the rejected version
  is not re-sent. A request with a stale nonce is ignored, as the xDS protocol says.
* A table change is pushed to every open stream; a change of the requested names is answered
  at once with the current version.
* :meth:`EdsService.close` ends every stream, so the server can stop without waiting for Envoy.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from envoy_data_plane.envoy.config.core.v3 import Address, SocketAddress
from envoy_data_plane.envoy.config.endpoint.v3 import (
    ClusterLoadAssignment,
    Endpoint,
    LbEndpoint,
    LocalityLbEndpoints,
)
from envoy_data_plane.envoy.service.discovery.v3 import DiscoveryRequest, DiscoveryResponse
from envoy_data_plane.google.protobuf import Any as AnyMessage

EDS_SERVICE = "envoy.service.endpoint.v3.EndpointDiscoveryService"
CLA_TYPE_URL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"


@dataclass(frozen=True, slots=True, order=True)
class LbHost:
    address: str
    port: int
    weight: int


class EndpointTable:
    """Cluster name -> hosts, versioned; :meth:`update` bumps the version only on a change."""

    def __init__(self) -> None:
        self.version = 0
        self.assignments: dict[str, tuple[LbHost, ...]] = {}
        self._watchers: set[asyncio.Event] = set()

    def update(self, assignments: Mapping[str, tuple[LbHost, ...]]) -> bool:
        new = {name: tuple(sorted(hosts)) for name, hosts in assignments.items()}
        if new == self.assignments:
            return False
        self.assignments = new
        self.version += 1
        for watcher in self._watchers:
            watcher.set()
        return True

    def watch(self, event: asyncio.Event) -> None:
        self._watchers.add(event)

    def unwatch(self, event: asyncio.Event) -> None:
        self._watchers.discard(event)


def load_assignment(cluster: str, hosts: tuple[LbHost, ...]) -> ClusterLoadAssignment:
    lb_endpoints = [
        LbEndpoint(
            endpoint=Endpoint(address=Address(
                socket_address=SocketAddress(address=h.address, port_value=h.port))),
            load_balancing_weight=h.weight,
        )
        for h in hosts
    ]
    return ClusterLoadAssignment(
        cluster_name=cluster,
        endpoints=[LocalityLbEndpoints(lb_endpoints=lb_endpoints)] if lb_endpoints else [],
    )


def discovery_response(table: EndpointTable, names: frozenset[str], nonce: str) -> bytes:
    """Empty ``names`` asks for every cluster (wildcard)."""
    wanted = sorted(names or table.assignments)
    resources = [
        AnyMessage(type_url=CLA_TYPE_URL, value=bytes(load_assignment(n, table.assignments[n])))
        for n in wanted if n in table.assignments
    ]
    response = DiscoveryResponse(version_info=str(table.version), resources=resources,
                                 type_url=CLA_TYPE_URL, nonce=nonce)
    return bytes(response)


class _Stream:
    """One Envoy stream's protocol state."""

    def __init__(self, table: EndpointTable) -> None:
        self.table = table
        self.names: frozenset[str] | None = None  # None until the first request
        self.sent_names: frozenset[str] | None = None
        self.sent_version = -1
        self.last_nonce = ""
        self.rejected_version = -1

    def on_request(self, request: DiscoveryRequest, logger: logging.Logger) -> None:
        if request.response_nonce and request.response_nonce != self.last_nonce:
            return  # stale: answers an older response
        error = request.error_detail
        if error is not None and (error.code or error.message):
            self.rejected_version = self.sent_version
            logger.warning("Envoy rejected endpoints (EDS NACK)",
                           extra={"version": request.version_info, "error": error.message[:500]})
        self.names = frozenset(request.resource_names)

    def due(self) -> bool:
        if self.names is None:
            return False
        if self.names != self.sent_names:
            return True
        return self.table.version not in (self.sent_version, self.rejected_version)


class EdsService:
    def __init__(self, table: EndpointTable, logger: logging.Logger) -> None:
        self._table = table
        self._logger = logger
        self._nonces = itertools.count(1)
        self._closing = asyncio.Event()
        self._wakes: set[asyncio.Event] = set()

    async def stream_endpoints(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        state = _Stream(self._table)
        wake = asyncio.Event()
        pending: list[DiscoveryRequest] = []
        ended = False

        async def pump() -> None:
            nonlocal ended
            try:
                async for raw in requests:
                    pending.append(DiscoveryRequest.parse(raw))
                    wake.set()
            except Exception as err:  # a malformed message or a reset: end this stream
                self._logger.warning("EDS stream ended", extra={"error": str(err)[:300]})
            finally:
                ended = True
                wake.set()

        self._table.watch(wake)
        self._wakes.add(wake)
        reader = asyncio.create_task(pump())
        try:
            while not ended and not self._closing.is_set():
                await wake.wait()
                wake.clear()
                while pending:
                    state.on_request(pending.pop(0), self._logger)
                if state.due() and not self._closing.is_set():
                    assert state.names is not None
                    nonce = str(next(self._nonces))
                    state.last_nonce, state.sent_names = nonce, state.names
                    state.sent_version = self._table.version
                    yield discovery_response(self._table, state.names, nonce)
        finally:
            self._table.unwatch(wake)
            self._wakes.discard(wake)
            reader.cancel()

    def close(self) -> None:
        """End every open stream (the router is stopping)."""
        self._closing.set()
        for wake in self._wakes:
            wake.set()

    def handler(self) -> grpc.GenericRpcHandler:
        method = grpc.stream_stream_rpc_method_handler(self.stream_endpoints)  # raw bytes
        return grpc.method_handlers_generic_handler(EDS_SERVICE, {"StreamEndpoints": method})
