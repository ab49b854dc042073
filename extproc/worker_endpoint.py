"""A worker's ``runtime_endpoint``: its URL shape, and the hosts the router refuses to send
requests (probes, then client traffic over EDS) to.

Contracts:

* :func:`check_endpoint` reads ``runtime_endpoint`` into ``(endpoint, scheme, host, port)``,
  the path made ``/v1``, appending ``("runtime_endpoint", reason)`` to ``problems`` for
  anything Envoy could not use (see :mod:`extproc.workers`) or that :func:`refused_host`
  names.
* :func:`refused_host` refuses, by the literal host only (names are never resolved at
  registration, so the answer does not depend on DNS at that moment): link-local
  (169.254.0.0/16, fe80::/10), unspecified (0.0.0.0, ::), multicast and broadcast
  addresses, the same addresses embedded in IPv6 (IPv4-mapped ``::ffff:a.b.c.d``,
  IPv4-compatible, 6to4, NAT64 ``64:ff9b::/96``, Teredo), and the cloud metadata services
  in :data:`METADATA_HOSTS` / :data:`METADATA_ADDRESSES`. Loopback and private addresses stay
  allowed: that is where real workers (and tests' workers) live.
* :func:`self_loop` refuses the router's own ports (its admin API, its ext_proc gRPC server,
  Envoy's listener and admin) on a local address (loopback, ``localhost``, or the very
  address the port is bound to): a worker there would send the router's traffic to itself.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

_DNS_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_DNS_NAME = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*\.?")

# Cloud instance-metadata services by name (GCP, AWS, generic short names that resolve to them
# inside those clouds). Compared lower-cased, without a trailing dot.
METADATA_HOSTS = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data",
    "instance-data.ec2.internal",
})
# ... and by an address that is not link-local: AWS over IPv6, Alibaba Cloud.
METADATA_ADDRESSES = frozenset({
    ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200"),
})
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


class OwnEndpoint(NamedTuple):
    """A port the router or its bundled Envoy listens on, and what it is (for the message)."""

    what: str
    host: str
    port: int


def check_endpoint(value: object,
                   problems: list[tuple[str, str]]) -> tuple[str, str, str, int]:
    """The endpoint with its path made ``/v1``, its scheme, host and port."""
    if not isinstance(value, str) or len(value) > 512:
        problems.append(("runtime_endpoint", "must be an http(s) URL string"))
        return "", "", "", 0
    try:
        parts = urlsplit(value)
        given = parts.port
    except ValueError as err:
        problems.append(("runtime_endpoint", f"not a valid URL: {err}"))
        return "", "", "", 0
    port = given if given is not None else 443 if parts.scheme == "https" else 80
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(("runtime_endpoint", "must be an http:// or https:// URL with a host"))
    elif (host_problem := _host_problem(parts.hostname)) is not None:
        problems.append(("runtime_endpoint", host_problem))
    elif (refused := refused_host(parts.hostname)) is not None:
        problems.append(("runtime_endpoint", refused))
    elif port == 0:
        problems.append(("runtime_endpoint", "port must be 1-65535"))
    elif parts.username or parts.password:
        problems.append(("runtime_endpoint", "must not carry credentials"))
    elif parts.query or parts.fragment:
        problems.append(("runtime_endpoint", "must not have a query or fragment"))
    elif parts.path.rstrip("/") not in ("", "/v1"):
        problems.append(("runtime_endpoint", "path must be /v1 (an empty path or / means "
                         "/v1): Envoy forwards /v1/... paths unchanged"))
    endpoint = urlunsplit((parts.scheme, parts.netloc, "/v1", "", ""))
    return endpoint, parts.scheme, parts.hostname or "", port


def _host_problem(host: str) -> str | None:
    """Why Envoy could never reach ``host`` (urlsplit's lower-cased hostname), or None."""
    shown = host[:64]
    if ":" in host:  # an IPv6 literal
        if "%" in host:
            return f"IPv6 zone ids are not accepted ('{shown}'): Envoy cannot use them"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"host '{shown}' is not a valid IPv6 address"
        return None
    if host.replace(".", "").isdigit():  # looks like IPv4: must be one
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"host '{shown}' is not a valid IPv4 address"
        return None
    if len(host) > 253 or not _DNS_NAME.fullmatch(host):
        return (f"host '{shown}' is not an IP address or DNS name (labels of letters, digits "
                "and '-', separated by '.')")
    return None


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, compatible, 6to4, NAT64, Teredo)."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64 or (int(address) >> 32 == 0 and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)  # NAT64, IPv4-compatible
    return None


def _refused_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if address in METADATA_ADDRESSES:
        return "a cloud metadata service"
    if address.is_unspecified:
        return "unspecified (it names no host)"
    if address.is_link_local:
        return "link-local (cloud metadata services live there)"
    if address.is_multicast or address == _BROADCAST:
        return "a multicast or broadcast address"
    return None


def refused_host(host: str) -> str | None:
    """Why the router refuses to send requests to ``host``, or None (see the module doc)."""
    shown = host[:64]
    address = _address(host)
    if address is None:
        if host.rstrip(".").lower() in METADATA_HOSTS:
            return f"host '{shown}' is a cloud metadata service; workers must not point there"
        return None
    why = _refused_address(address)
    if why is None and isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        why = _refused_address(embedded) if embedded is not None else None
        if why is not None:
            why = f"an IPv6 form of {embedded}, which is {why}"
    return None if why is None else f"host '{shown}' is {why}; workers must not point there"


def _local(host: str) -> bool:
    address = _address(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address is not None:
        return address.is_loopback
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


def self_loop(host: str, port: int, own: Iterable[OwnEndpoint]) -> str | None:
    """Why ``host:port`` is one of the router's own ports (``own``), or None."""
    for mine in own:
        if mine.port != port or mine.port == 0:
            continue
        same_host = _address(host) is not None and _address(host) == _address(mine.host)
        if _local(host) or same_host or host.lower() == mine.host.lower():
            shown = f"[{host}]" if ":" in host else host
            return (f"{shown}:{port} is the router's own {mine.what}: a worker there would "
                    "send the router's traffic to itself")
    return None
