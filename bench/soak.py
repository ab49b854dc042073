"""Soak: mixed traffic through real Envoy + the router (a subprocess) at a fixed concurrency.

Three simulated vLLM backends (``python -m extproc.simulated_backend``), the router
(``python -m extproc.cli serve``, keyword signals, ``listener.max_request_bytes`` 64 KiB) and
the bundled Envoy with the rendered bootstrap. After a warm-up, ``--concurrency`` keep-alive
connections send the mix of bench/_soak_traffic.py (routed, streamed, explicit, and five kinds
of malformed request) for ``--duration`` s or ``--max-requests``, whichever comes first. Every
answer is checked (status, backend, rewritten model, decision header, OpenAI body or error
shape, SSE framing). The router's RSS (VmRSS of /proc/<pid>/status) is sampled after the
warm-up, every ``--sample-every`` s and at the end; CPU from /proc/<pid>/stat.

Exit 1 when any answer was unexpected or the router's RSS grew by ``--max-rss-growth`` % or
more (the target: zero unexpected errors and under 5% growth for 300 s at concurrency 64).
Not a test; loopback only, every port below 32768.

Run: .venv/bin/python bench/soak.py [--duration 300] [--concurrency 64] [--max-requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Run as a script, bench/ is sys.path[0] and bench/classifiers.py would shadow the classifiers
# package; the repository root must come first instead.
if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import aiohttp
import yaml

from bench import _stack as st
from bench._soak_traffic import MODELS, PROMPTS, Plan, Tally, Unexpected, send, table
from extproc.config import RouterConfig, load_config
from extproc.envoy_process import EnvoyProcess
from extproc.envoy_render import bootstrap, to_yaml
from extproc.localnet import free_port

MAX_REQUEST_BYTES = 64 * 1024


def router_document(ports: dict[str, int]) -> dict[str, Any]:
    """Keyword routing over three models, one simulated backend each (see ``PROMPTS``)."""
    return {
        "listener": {"address": f"127.0.0.1:{ports['listener']}",
                     "admin": f"127.0.0.1:{ports['envoy_admin']}",
                     "max_request_bytes": MAX_REQUEST_BYTES},
        "router": {"grpc": f"127.0.0.1:{ports['grpc']}", "admin": f"127.0.0.1:{ports['admin']}",
                   "auto_model_names": ["auto"]},
        "providers": {
            "defaults": {"model": "general"},
            "models": [
                {"name": name, "provider_model_id": provider, "backend_refs": [
                    {"name": backend, "endpoint": f"127.0.0.1:{ports[backend]}",
                     "protocol": "http", "weight": 1}]}
                for name, provider, backend in MODELS
            ],
        },
        "signals": [
            {"name": "code_keywords", "type": "keyword",
             "keywords": ["python", "function", "stack trace", "sql", "bug"]},
            {"name": "math_keywords", "type": "keyword",
             "keywords": ["derivative", "integral", "theorem", "prove", "equation"]},
        ],
        "decisions": [
            {"name": "code", "priority": 20, "rules": {"signal": "code_keywords"},
             "model": "code"},
            {"name": "reasoning", "priority": 10, "rules": {"signal": "math_keywords"},
             "model": "reasoning"},
        ],
    }


@dataclass
class Soak:
    config: RouterConfig
    work: Path
    children: list[st.Child] = field(default_factory=list)
    router: st.Child | None = None
    envoy: EnvoyProcess | None = None

    @property
    def url(self) -> str:
        return f"http://{self.config.listener.address}"

    async def start(self, config_path: Path, ports: dict[str, int], start_timeout: float,
                    envoy_concurrency: int) -> None:
        for _, provider, backend in MODELS:
            argv = [sys.executable, "-m", "extproc.simulated_backend", "--id", backend,
                    "--model", provider, "--port", str(ports[backend])]
            child = st.Child(backend, argv, self.work / f"{backend}.log")
            self.children.append(child)
        for child, (_, _, backend) in zip(self.children, MODELS, strict=True):
            await child.wait_http_ok(f"http://127.0.0.1:{ports[backend]}/health", 30)
        argv = [sys.executable, "-m", "extproc.cli", "serve", "--config", str(config_path),
                "--log-level", "warning"]
        self.router = st.Child("router", argv, self.work / "router.log")
        self.children.append(self.router)
        await self.router.wait_http_ok(f"http://{self.config.router.admin}/health", start_timeout)
        self.envoy = EnvoyProcess(to_yaml(bootstrap(self.config)), self.config.listener.admin,
                                  concurrency=envoy_concurrency, log_path=self.work / "envoy.log")
        self.envoy.start()
        await self.envoy.wait_ready()

    def stop(self) -> None:
        if self.envoy is not None:
            self.envoy.stop()
        for child in reversed(self.children):
            child.stop()


@dataclass(frozen=True)
class Sample:
    at_s: float
    requests: int
    rss_mib: float
    envoy_rss_mib: float


async def settle(soak: Soak, plan: Plan) -> None:
    """Every probe once, until all pass (Envoy's first health checks may still be running)."""
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for probe in plan.every_probe():
            while True:
                try:
                    await send(session, soak.url, probe)
                    break
                except Unexpected as err:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{probe.kind} {probe.path} never passed: {err}\n"
                                           f"{soak.envoy.logs(20) if soak.envoy else ''}") from err
                    await asyncio.sleep(0.3)


async def drive(soak: Soak, plan: Plan, tally: Tally, concurrency: int, seconds: float,
                max_requests: int, on_tick: Any = None, tick_s: float = 0.0) -> float:
    """A closed loop of ``concurrency`` workers; returns the elapsed seconds."""
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    issued = 0
    started = time.perf_counter()
    deadline = started + seconds

    async def worker() -> None:
        nonlocal issued
        while time.perf_counter() < deadline and issued < max_requests:
            probe = plan.probe(issued)
            issued += 1
            await tally.run(session, soak.url, probe)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(tick_s)
            on_tick()

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tick = asyncio.create_task(ticker()) if on_tick is not None and tick_s > 0 else None
        try:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finally:
            if tick is not None:
                tick.cancel()
    return time.perf_counter() - started


def log_problems(path: Path) -> list[str]:
    """Router log lines at warning level or above (it runs with --log-level warning)."""
    try:
        return [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def report(args: argparse.Namespace, tally: Tally, seconds: float, samples: list[Sample],
           cpu_s: float, envoy_cpu_s: float, router_log: list[str]) -> bool:
    """Print everything; True when the run met the target."""
    print(f"\n## {seconds:.0f} s, concurrency {args.concurrency}, {tally.requests} requests "
          f"({tally.requests / max(seconds, 1e-9):.1f} req/s)\n")
    print(table(tally, seconds))
    print("\nunexpected answers by (kind, category):" if tally.errors else
          "\nunexpected answers: none")
    for (kind, category), n in sorted(tally.errors.items()):
        print(f"  {kind}/{category}: {n}")
        for sample in tally.samples[(kind, category)]:
            print(f"    e.g. {sample[:300]}")
    print("\nrouter RSS (MiB) by time:")
    print("  " + ", ".join(f"{s.at_s:.0f}s: {s.rss_mib:.1f}" for s in samples))
    first, last = samples[0], samples[-1]
    growth = (last.rss_mib - first.rss_mib) / first.rss_mib * 100
    peak = max(s.rss_mib for s in samples)
    print(f"router RSS: start (after warm-up) {first.rss_mib:.1f} MiB, end {last.rss_mib:.1f} "
          f"MiB, peak {peak:.1f} MiB, growth {growth:+.2f}% (limit {args.max_rss_growth:g}%)")
    print(f"envoy RSS: start {first.envoy_rss_mib:.1f} MiB, end {last.envoy_rss_mib:.1f} MiB")
    n = max(tally.requests, 1)
    print(f"router CPU: {cpu_s:.1f} s, {cpu_s / n * 1e3:.3f} ms per request; "
          f"envoy CPU: {envoy_cpu_s:.1f} s, {envoy_cpu_s / n * 1e3:.3f} ms per request")
    print(f"router log lines at warning or above: {len(router_log)}")
    for line in router_log[:5]:
        print(f"  {line[:300]}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    ok = tally.error_count == 0 and growth < args.max_rss_growth
    print(f"\nresult: {'PASS' if ok else 'FAIL'} (unexpected answers {tally.error_count}, "
          f"RSS growth {growth:+.2f}%)")
    return ok


async def main_async(args: argparse.Namespace) -> bool:
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        work = Path(tmp)
        names = ["listener", "envoy_admin", "grpc", "admin", *(b for _, _, b in MODELS)]
        ports = {name: free_port() for name in names}
        config_path = work / "router.yaml"
        config_path.write_text(yaml.safe_dump(router_document(ports), sort_keys=False))
        config = load_config(config_path)
        soak = Soak(config, work)
        print(f"machine: {os.cpu_count()} CPUs (shared), load average {os.getloadavg()[0]:.2f}; "
              f"{len(PROMPTS)} prompts; max_request_bytes {MAX_REQUEST_BYTES}", flush=True)
        try:
            await soak.start(config_path, ports, args.start_timeout, args.envoy_concurrency)
            assert soak.router is not None and soak.envoy is not None
            router_pid, envoy_pid = soak.router.pid, st.envoy_pid(soak.envoy)
            plan = Plan(config.router.auto_model_names[0], MAX_REQUEST_BYTES)
            await settle(soak, plan)
            warm = Tally()
            await drive(soak, plan, warm, args.concurrency, args.warmup, args.max_requests)
            print(f"warm-up: {warm.requests} requests in {args.warmup:g} s, "
                  f"{warm.error_count} unexpected", flush=True)
            tally = Tally()
            started = time.perf_counter()
            samples: list[Sample] = []

            def sample() -> None:
                soak.router.check_alive()  # type: ignore[union-attr]
                samples.append(Sample(time.perf_counter() - started, tally.requests,
                                      st.rss_mib(router_pid), st.rss_mib(envoy_pid)))
                if len(samples) > 1:
                    s = samples[-1]
                    print(f"  {s.at_s:5.0f} s: {s.requests} requests, {tally.error_count} "
                          f"unexpected, router RSS {s.rss_mib:.1f} MiB", flush=True)

            sample()
            cpu0, envoy_cpu0 = st.cpu_seconds(router_pid), st.cpu_seconds(envoy_pid)
            seconds = await drive(soak, plan, tally, args.concurrency, args.duration,
                                  args.max_requests, sample, args.sample_every)
            cpu_s = st.cpu_seconds(router_pid) - cpu0
            envoy_cpu_s = st.cpu_seconds(envoy_pid) - envoy_cpu0
            sample()
            return report(args, tally, seconds, samples, cpu_s, envoy_cpu_s,
                          log_problems(work / "router.log"))
        finally:
            await asyncio.to_thread(soak.stop)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=300.0, help="measured seconds")
    parser.add_argument("--concurrency", type=int, default=64, help="keep-alive connections")
    parser.add_argument("--max-requests", type=int, default=1_000_000,
                        help="stop the measured run after this many requests")
    parser.add_argument("--warmup", type=float, default=20.0,
                        help="seconds of the same traffic before the first RSS sample")
    parser.add_argument("--sample-every", type=float, default=30.0, help="RSS sample interval")
    parser.add_argument("--max-rss-growth", type=float, default=5.0,
                        help="fail at this RSS growth (percent) or more")
    parser.add_argument("--envoy-concurrency", type=int, default=1, help="Envoy worker threads")
    parser.add_argument("--start-timeout", type=float, default=120.0,
                        help="seconds to wait for the router to report ready")
    args = parser.parse_args()
    return 0 if asyncio.run(main_async(args)) else 1


if __name__ == "__main__":
    sys.exit(main())
