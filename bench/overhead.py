"""Router overhead: the same request mix and load generator against five Envoy set-ups.

  (a) Envoy, no ext_proc (the route goes straight to the backend cluster)
  (b) Envoy + null ext_proc (bench/null_extproc.py: cached bytes; the floor for a Python ext_proc,
      with the standard two messages per request: headers, then the buffered body)
  (b1) the same null ext_proc behind the router's own rendered routes (one message per
      request: see `router.one_message_requests`), for information
  (c) Envoy + router, explicit model names
  (d) Envoy + router, model "auto", keyword signals only
  (e) Envoy + router, model "auto", learned `domain` signal on the bundled default head
      (plus the keywords; skipped, with the reason, when the head is absent)

The backend is an Envoy direct_response listener (a fixed chat.completion). Each cell is a
closed loop of `c` connections for `--duration` s (wrk, else a bounded aiohttp client). Cells
are interleaved (every round runs each variant in turn, in a rotated order) and repeated
`--rounds` times; figures are medians over rounds and ratios are computed within a round, so
load from other processes on this shared machine hits every variant alike. CPU per request
comes from /proc/<pid>/stat of each process over its cells. Not a test; numbers depend on the
machine, only the ratios travel.

Run: .venv/bin/python bench/overhead.py [--duration 5] [--rounds 3] [--only a,b,c,d,e]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Run as a script, bench/ is sys.path[0] and bench/classifiers.py would shadow the classifiers
# package; the repository root must come first instead.
if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import yaml

from bench import _stack as st
from bench._load import LoadGenerator, load_generator
from bench._report import E_HIGH, LABELS, Cell, RawFigures, Run, report
from extproc.config import RouterConfig
from extproc.envoy_process import EnvoyProcess
from extproc.localnet import free_port
from extproc.names import CHAT_COMPLETIONS_PATH, DECISION_HEADER

STACK_OF = {"a": "none", "b": "null", "b1": "null1", "c": "keyword", "d": "keyword",
            "e": "learned"}


@dataclass
class Stack:
    name: str
    config: RouterConfig
    envoy: EnvoyProcess
    extproc: st.Child | None
    rss_start_mib: float = 0.0

    @property
    def url(self) -> str:
        return f"http://{self.config.listener.address}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.config.router.admin}/metrics"


def bodies_for(variant: str, config: RouterConfig) -> tuple[bytes, ...]:
    if variant in ("d", "e"):
        return tuple(st.chat_body(config.router.auto_model_names[0], p) for p in st.PROMPTS)
    names = list(config.models)
    return tuple(st.chat_body(names[i % len(names)], p) for i, p in enumerate(st.PROMPTS))


async def start_stack(name: str, document: dict[str, Any], backend_port: int, work: Path,
                      args: argparse.Namespace) -> Stack:
    ports = st.Ports.pick()
    config = st.write_router_config(document, ports, backend_port, work / f"{name}.yaml")
    child: st.Child | None = None
    grpc = f"127.0.0.1:{ports.grpc}"
    if name in ("null", "null1"):
        child = st.null_extproc(ports.grpc, config.default_model.cluster, work / f"{name}.log")
        await child.wait_port(ports.grpc, 30)
    elif name in ("keyword", "learned"):
        child = st.router(work / f"{name}.yaml", args.router_log_level, work / f"{name}.log")
        await child.wait_http_ok(f"http://127.0.0.1:{ports.admin}/health", args.start_timeout)
    envoy = st.front_envoy(config, grpc if child else None, args.envoy_concurrency,
                           work / f"envoy-{name}.log")
    await envoy.wait_ready()
    stack = Stack(name, config, envoy, child)
    if child is not None:
        stack.rss_start_mib = st.rss_mib(child.pid)
    return stack


async def check(variant: str, stack: Stack) -> str:
    """Every body once: all must answer 200 (retried while Envoy's health checks settle)."""
    decisions: list[str] = []
    deadline = time.monotonic() + 30
    for body in bodies_for(variant, stack.config):
        while True:
            status, headers = await asyncio.to_thread(
                st.post, stack.url + CHAT_COMPLETIONS_PATH, body)
            if status == 200 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.3)
        if status != 200:
            raise RuntimeError(f"({variant}) answered {status}:\n{stack.envoy.logs(20)}")
        decisions.append(headers.get(DECISION_HEADER, "-"))
    return ", ".join(sorted(set(decisions)))


def _degraded(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items()
               if (k.startswith("semantic_router_requests_total") and 'outcome="unclassified"' in k)
               or k.startswith("semantic_router_signal_errors_total"))


def _batches(metrics: dict[str, float]) -> tuple[float, float]:
    total = sum(v for k, v in metrics.items()
                if k.startswith("semantic_router_classifier_batch_size_sum"))
    count = sum(v for k, v in metrics.items()
                if k.startswith("semantic_router_classifier_batch_size_count"))
    return total, count


async def measure(variant: str, stack: Stack, concurrency: int, rnd: int, seconds: float,
                  load: LoadGenerator, backend_pid: int) -> Cell:
    pids = {"envoy": st.envoy_pid(stack.envoy), "backend": backend_pid}
    if stack.extproc is not None:
        pids["extproc"] = stack.extproc.pid
    before = {k: st.cpu_seconds(p) for k, p in pids.items()}
    learned = stack.name == "learned"
    metrics_before = await asyncio.to_thread(st.scrape, stack.metrics_url) if learned else {}
    result = await load.run(stack.url, CHAT_COMPLETIONS_PATH, bodies_for(variant, stack.config),
                            concurrency, seconds)
    used = {k: st.cpu_seconds(p) - before[k] for k, p in pids.items()}
    per_request = {k: v * 1e6 / max(result.requests, 1) for k, v in used.items()}
    cell = Cell(variant, concurrency, rnd, result, per_request.get("extproc"),
                per_request["envoy"], per_request["backend"])
    if learned:
        metrics_after = await asyncio.to_thread(st.scrape, stack.metrics_url)
        (s0, n0), (s1, n1) = _batches(metrics_before), _batches(metrics_after)
        cell.batch_mean = (s1 - s0) / (n1 - n0) if n1 > n0 else None
        cell.degraded = int(_degraded(metrics_after) - _degraded(metrics_before))
    if stack.extproc is not None:
        stack.extproc.check_alive()
    return cell


def pick_variants(args: argparse.Namespace, learned_doc: dict[str, Any], work: Path
                  ) -> list[str]:
    variants = [v.strip() for v in args.only.split(",") if v.strip()]
    unknown = set(variants) - set(LABELS)
    if unknown:
        raise SystemExit(f"--only: unknown variants {sorted(unknown)}; use {','.join(LABELS)}")
    if "e" in variants:
        from bench._encoder import missing_heads

        probe = st.write_router_config(learned_doc, st.Ports(1, 2, 3, 4), 5, work / "probe.yaml")
        why = missing_heads(probe)
        if why is not None:
            print(f"(e) skipped: {why} (train the default head or pass --config with `model:`)")
            variants.remove("e")
    return variants


async def main_async(args: argparse.Namespace) -> None:
    learned_doc = (yaml.safe_load(Path(args.config).read_text()) if args.config
                   else st.classifier_config())
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        work = Path(tmp)
        variants = pick_variants(args, learned_doc, work)
        if not variants:
            print("nothing to run")
            return
        load = load_generator(args.load, work, args.max_requests)
        print(f"machine: {os.cpu_count()} CPUs (shared), load average {os.getloadavg()[0]:.2f}; "
              f"load generator: {load.name}; Envoy concurrency {args.envoy_concurrency}; "
              f"{args.rounds} rounds x {args.duration:g} s per cell ((e): {args.e_duration:g} s)")
        backend_port, backend_admin = free_port(), free_port()
        model_ids = sorted({m["provider_model_id"] for doc in (st.KEYWORD_CONFIG, learned_doc)
                            for m in doc["providers"]["models"]})
        backend = st.start_envoy(st.backend_bootstrap(backend_port, backend_admin, model_ids),
                                 backend_admin, 1, work / "backend.log")
        stacks: dict[str, Stack] = {}
        try:
            await backend.wait_ready()
            for name in dict.fromkeys(STACK_OF[v] for v in variants):
                document = learned_doc if name == "learned" else st.KEYWORD_CONFIG
                if name == "null":  # the floor as the issue defines it: headers + body
                    document = {**document, "router": {**document.get("router", {}),
                                                       "one_message_requests": False}}
                stacks[name] = await start_stack(name, document, backend_port, work, args)
                print(f"stack {name!r} ready", flush=True)
            for v in variants:
                decisions = await check(v, stacks[STACK_OF[v]])
                print(f"({v}) {LABELS[v]}: 200 OK, decisions: {decisions}")
            await run_rounds(args, variants, stacks, load, st.envoy_pid(backend))
        finally:
            for stack in stacks.values():
                await asyncio.to_thread(stack.envoy.stop)
                if stack.extproc is not None:
                    stack.extproc.stop()
            await asyncio.to_thread(backend.stop)
        print(f"load average at the end: {os.getloadavg()[0]:.2f}")


async def run_rounds(args: argparse.Namespace, variants: list[str], stacks: dict[str, Stack],
                     load: LoadGenerator, backend_pid: int) -> None:
    raw = None
    if "e" in variants:
        from bench._encoder import RawEncoder

        raw = RawEncoder(stacks["learned"].config, st.PROMPTS)
        print(f"raw encoder loaded in-process on {raw.device}")
    levels = [1, 16, E_HIGH]
    for v in variants:  # warm-up: connections, Envoy health checks, first-call paths
        for c in ([16, E_HIGH] if v == "e" else [16]):
            await measure(v, stacks[STACK_OF[v]], c, -1, 1, load, backend_pid)
    run = Run()
    for rnd in range(args.rounds):
        shift = rnd % len(variants)
        order = variants[shift:] + variants[:shift]
        for c in levels:
            for v in order:
                if c == E_HIGH and v != "e":
                    continue
                seconds = args.e_duration if v == "e" else args.duration
                cell = await measure(v, stacks[STACK_OF[v]], c, rnd, seconds, load, backend_pid)
                run.cells.append(cell)
                print(f"round {rnd} ({v}) c={c}: {cell.load.rps:.0f} req/s, "
                      f"p50 {cell.load.p50_ms:.2f} ms, errors {cell.load.errors}", flush=True)
                if raw is not None and v == "e" and c in (1, E_HIGH):
                    batch = max(1, round(cell.batch_mean or 1))
                    one, side = await asyncio.to_thread(raw.throughput, batch, seconds)
                    run.raw[(rnd, c)] = RawFigures(batch, one, side)
    report(run, variants, args.rounds)
    for name, stack in stacks.items():
        if stack.extproc is not None:
            print(f"{stack.extproc.name} ({name}) RSS: {stack.rss_start_mib:.0f} MiB after "
                  f"start-up, {st.rss_mib(stack.extproc.pid):.0f} MiB at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    parser.add_argument("--e-duration", type=float, help="seconds per (e) cell (default: "
                        "--duration)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--only", default="a,b,b1,c,d,e", help="variants to run, e.g. a,b,c")
    parser.add_argument("--config", help="router config for (e) (addresses and backends are "
                        "replaced; default: keywords + a domain signal on the default head)")
    parser.add_argument("--load", choices=["auto", "wrk", "python"], default="auto",
                        help="load generator (auto: wrk when installed)")
    parser.add_argument("--max-requests", type=int, default=200_000,
                        help="per-cell request cap of the python load generator")
    parser.add_argument("--envoy-concurrency", type=int, default=1, help="Envoy worker threads")
    parser.add_argument("--router-log-level", default="info", help="router --log-level")
    parser.add_argument("--start-timeout", type=float, default=300.0,
                        help="seconds to wait for a router to report ready")
    args = parser.parse_args()
    if args.e_duration is None:
        args.e_duration = args.duration
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
