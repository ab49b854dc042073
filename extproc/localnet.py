"""Loopback port picking for tests, benchmarks and the demo.

Ports come from 20000-32000 (below the kernel's ephemeral range, as this project's rules ask),
checked free by binding; a random start keeps parallel runs from colliding.
"""

from __future__ import annotations

import random
import socket

LOW, HIGH = 20000, 32000


def free_port(host: str = "127.0.0.1", attempts: int = 200) -> int:
    start = random.randrange(LOW, HIGH)
    for offset in range(attempts):
        port = LOW + (start - LOW + offset * 7) % (HIGH - LOW)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {LOW}-{HIGH} on {host}")
