"""Load generators for bench/overhead.py: wrk (preferred) or a bounded aiohttp client.

Both run a closed loop: ``concurrency`` connections, each sending the next body of a fixed list
as soon as its previous answer arrived, for ``duration_s`` seconds. Both report the same
``LoadResult``; latencies are per request, from send to the whole answer.

wrk runs with one thread (the machine has 2 shared cores) and a Lua script that pre-formats
every request once and prints a JSON summary. The aiohttp fallback runs in the bench process
and is also capped at ``max_requests`` so a fast stack cannot make it run away.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

_MARK = "BENCH_JSON "
_LUA = """
local bodies = {
%(bodies)s
}
local requests = {}
local next_index = 0

init = function(args)
  for i, body in ipairs(bodies) do
    requests[i] = wrk.format("POST", "%(path)s", {["Content-Type"] = "application/json"}, body)
  end
end

request = function()
  next_index = next_index %% #requests + 1
  return requests[next_index]
end

done = function(summary, latency, requests_)
  local e = summary.errors
  io.write(string.format(
    '%(mark)s{"requests":%%d,"duration_us":%%d,"errors":%%d,"p50_us":%%d,"p99_us":%%d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass(frozen=True)
class LoadResult:
    requests: int
    seconds: float
    errors: int  # connection errors, timeouts and non-2xx answers
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


def wrk_path() -> str | None:
    return shutil.which("wrk")


def _lua_long_string(body: bytes) -> str:
    text = body.decode("utf-8")
    level = 1
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


class WrkLoad:
    name = "wrk"

    def __init__(self, binary: str, workdir: Path) -> None:
        self._binary = binary
        self._workdir = workdir
        self._scripts: dict[tuple[str, tuple[bytes, ...]], Path] = {}

    def _script(self, path: str, bodies: tuple[bytes, ...]) -> Path:
        key = (path, bodies)
        if key not in self._scripts:
            script = self._workdir / f"load-{len(self._scripts)}.lua"
            lua_bodies = ",\n".join(f"  {_lua_long_string(b)}" for b in bodies)
            script.write_text(_LUA % {"bodies": lua_bodies, "path": path, "mark": _MARK})
            self._scripts[key] = script
        return self._scripts[key]

    async def run(
        self, url: str, path: str, bodies: tuple[bytes, ...], concurrency: int, duration_s: float
    ) -> LoadResult:
        script = self._script(path, bodies)
        process = await asyncio.create_subprocess_exec(
            self._binary, "-t1", f"-c{concurrency}", f"-d{max(1, round(duration_s))}s",
            "--timeout", "10s", "-s", str(script), url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(process.communicate(), timeout=duration_s + 60)
        text = out.decode(errors="replace")
        for line in text.splitlines():
            if line.startswith(_MARK):
                data = json.loads(line[len(_MARK):])
                return LoadResult(
                    requests=int(data["requests"]),
                    seconds=data["duration_us"] / 1e6,
                    errors=int(data["errors"]),
                    p50_ms=data["p50_us"] / 1000,
                    p99_ms=data["p99_us"] / 1000,
                )
        raise RuntimeError(f"wrk printed no summary (exit {process.returncode}):\n{text}")


class PythonLoad:
    """Closed-loop aiohttp client in this process: bounded by time and by request count."""

    name = "aiohttp"

    def __init__(self, max_requests: int = 200_000) -> None:
        self._max_requests = max_requests

    async def run(
        self, url: str, path: str, bodies: tuple[bytes, ...], concurrency: int, duration_s: float
    ) -> LoadResult:
        latencies: list[float] = []
        errors = 0
        counter = 0
        headers = {"content-type": "application/json"}
        connector = aiohttp.TCPConnector(limit=concurrency)
        timeout = aiohttp.ClientTimeout(total=10)
        target = url.rstrip("/") + path

        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            deadline = time.perf_counter() + duration_s

            async def worker() -> None:
                nonlocal errors, counter
                while time.perf_counter() < deadline and counter < self._max_requests:
                    body = bodies[counter % len(bodies)]
                    counter += 1
                    started = time.perf_counter()
                    try:
                        async with session.post(target, data=body, headers=headers) as response:
                            await response.read()
                            ok = 200 <= response.status < 300
                    except (aiohttp.ClientError, TimeoutError):
                        ok = False
                    latencies.append(time.perf_counter() - started)
                    errors += not ok

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - started
        if not latencies:
            return LoadResult(0, elapsed, errors, 0.0, 0.0)
        cuts = statistics.quantiles(latencies, n=100, method="inclusive")
        return LoadResult(len(latencies), elapsed, errors, cuts[49] * 1000, cuts[98] * 1000)


LoadGenerator = WrkLoad | PythonLoad


def load_generator(kind: str, workdir: Path, max_requests: int) -> LoadGenerator:
    """``auto``: wrk when installed, else the aiohttp client; ``wrk`` or ``python`` force one."""
    binary = wrk_path()
    if kind == "wrk" or (kind == "auto" and binary is not None):
        if binary is None:
            raise SystemExit("wrk is not installed (apt-get install -y wrk), use --load python")
        return WrkLoad(binary, workdir)
    return PythonLoad(max_requests)
