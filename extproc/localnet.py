"""Loopback port picking for tests, benchmarks and the demo.

Ports come from 20000-32000 (below the kernel's ephemeral range, as this project's rules ask),
checked free by binding; a random start keeps parallel runs from colliding. A port is never
handed out twice by one process: a caller may take several ports before binding any of them
(a whole test stack), and a second caller must not get one of those in the meantime.
"""

from __future__ import annotations

import random
import socket
import threading

LOW, HIGH = 20000, 32000

# Process-wide on purpose: uniqueness only holds if every caller shares it.
_HANDED_OUT: set[int] = set()
_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1", attempts: int = 500) -> int:
    start = random.randrange(LOW, HIGH)
    with _LOCK:
        if len(_HANDED_OUT) > (HIGH - LOW) // 2:  # a long run: forget the oldest half
            _HANDED_OUT.clear()
        for offset in range(attempts):
            port = LOW + (start - LOW + offset * 7) % (HIGH - LOW)
            if port in _HANDED_OUT:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    raise OSError(f"no free port in {LOW}-{HIGH} on {host}")
