"""Router overhead: the same request mix and load generator against five Envoy set-ups.

  (a) Envoy, no ext_proc (the route goes straight to the backend cluster)
  (b) Envoy + null ext_proc (bench/null_extproc.py: cached bytes; the floor for a Python ext_proc)
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
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
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
from bench._load import LoadGenerator, LoadResult, load_generator
from extproc.config import RouterConfig
from extproc.envoy_process import EnvoyProcess
from extproc.localnet import free_port
from extproc.names import CHAT_COMPLETIONS_PATH, DECISION_HEADER

LABELS = {
    "a": "Envoy, no ext_proc",
    "b": "Envoy + null ext_proc",
    "c": "router, explicit model",
    "d": "router, auto, keywords",
    "e": "router, auto, domain classifier",
}
STACK_OF = {"a": "none", "b": "null", "c": "keyword", "d": "keyword", "e": "learned"}
E_HIGH = 32


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


@dataclass
class Cell:
    variant: str
    concurrency: int
    round: int
    load: LoadResult
    extproc_us: float | None
    envoy_us: float
    backend_us: float
    batch_mean: float | None = None
    degraded: int = 0  # learned requests unclassified or with a failed signal


@dataclass
class Run:
    cells: list[Cell] = field(default_factory=list)
    raw: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))

    def get(self, variant: str, concurrency: int, rnd: int) -> Cell | None:
        for cell in self.cells:
            if (cell.variant, cell.concurrency, cell.round) == (variant, concurrency, rnd):
                return cell
        return None


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
    if name == "null":
        child = st.null_extproc(ports.grpc, config.default_model.cluster, work / "null.log")
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


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(run: Run, variants: list[str]) -> str:
    head = ("| variant | c | req/s | p50 ms | p99 ms | errors | ext_proc CPU µs/req "
            "| front Envoy CPU µs/req | backend CPU µs/req | encoder batch |")
    lines = [head, "|" + "---|" * 10]
    for variant in variants:
        for c in sorted({cell.concurrency for cell in run.cells if cell.variant == variant}):
            cells = [x for x in run.cells if x.variant == variant and x.concurrency == c]
            ext = [x.extproc_us for x in cells if x.extproc_us is not None]
            batch = [x.batch_mean for x in cells if x.batch_mean is not None]
            errors = sum(x.load.errors for x in cells) + sum(x.degraded for x in cells)
            lines.append(
                f"| ({variant}) {LABELS[variant]} | {c} "
                f"| {_median([x.load.rps for x in cells]):.0f} "
                f"| {_median([x.load.p50_ms for x in cells]):.2f} "
                f"| {_median([x.load.p99_ms for x in cells]):.2f} | {errors} "
                f"| {f'{_median(ext):.0f}' if ext else '-'} "
                f"| {_median([x.envoy_us for x in cells]):.0f} "
                f"| {_median([x.backend_us for x in cells]):.0f} "
                f"| {f'{_median(batch):.1f}' if batch else '-'} |"
            )
    return "\n".join(lines)


def _per_round(run: Run, rounds: int, fn: Any) -> list[float]:
    out = []
    for rnd in range(rounds):
        value = fn(rnd)
        if value is not None:
            out.append(value)
    return out


def ratios(run: Run, rounds: int) -> list[tuple[str, list[float], str, float | None]]:
    """(name, per-round values, comparison, target); target None = informative only."""

    def rps(v: str, c: int, r: int) -> float | None:
        cell = run.get(v, c, r)
        return cell.load.rps if cell and cell.load.requests else None

    def p50(v: str, c: int, r: int) -> float | None:
        cell = run.get(v, c, r)
        return cell.load.p50_ms if cell and cell.load.requests else None

    def ratio(v: str, cv: int, w: str, cw: int) -> Any:
        def fn(r: int) -> float | None:
            x, y = rps(v, cv, r), rps(w, cw, r)
            return x / y if x is not None and y else None
        return fn

    def added(v: str) -> Any:
        def fn(r: int) -> float | None:
            x, y = p50(v, 1, r), p50("b", 1, r)
            return x - y if x is not None and y is not None else None
        return fn

    def raw_ratio(r: int) -> float | None:
        x = rps("e", E_HIGH, r)
        raw = [t for rr, t in run.raw.get(r, [])]
        return x / raw[0] if x is not None and raw else None

    rows: list[tuple[str, list[float], str, float | None]] = [
        ("(c)/(b) req/s at c=16", _per_round(run, rounds, ratio("c", 16, "b", 16)), ">=", 0.8),
        ("(d)/(b) req/s at c=16", _per_round(run, rounds, ratio("d", 16, "b", 16)), ">=", 0.8),
        ("(c) p50 - (b) p50 at c=1, ms", _per_round(run, rounds, added("c")), "<=", 0.3),
        ("(d) p50 - (b) p50 at c=1, ms", _per_round(run, rounds, added("d")), "<=", 0.3),
        (f"(e) c={E_HIGH} req/s / raw encoder texts/s at the router's batch size",
         _per_round(run, rounds, raw_ratio), ">=", 0.8),
        (f"(e) c={E_HIGH} / (e) c=1 req/s",
         _per_round(run, rounds, ratio("e", E_HIGH, "e", 1)), ">=", 2.0),
        ("(b)/(a) req/s at c=16", _per_round(run, rounds, ratio("b", 16, "a", 16)), "", None),
        ("(c)/(a) req/s at c=16", _per_round(run, rounds, ratio("c", 16, "a", 16)), "", None),
    ]
    return rows


def report(run: Run, variants: list[str], rounds: int, stacks: dict[str, Stack]) -> None:
    print("\n" + table(run, variants))
    for rnd, values in sorted(run.raw.items()):
        for batch, texts_s in values:
            print(f"raw encoder (in-process, same runner) round {rnd}: batch {batch}: "
                  f"{texts_s:.0f} texts/s")
    print("\nratios (median over rounds; per-round values in brackets)")
    for name, values, op, target in ratios(run, rounds):
        shown = ", ".join(f"{v:.3f}" for v in values)
        if not values:
            print(f"SKIP  {name}: not measured")
            continue
        value = statistics.median(values)
        if target is None:
            print(f"info  {name} = {value:.3f} [{shown}]")
            continue
        ok = value >= target if op == ">=" else value <= target
        print(f"{'PASS' if ok else 'FAIL'}  {name} = {value:.3f} [{shown}] "
              f"(target {op} {target})")
    for name, stack in stacks.items():
        if stack.extproc is not None:
            print(f"{stack.extproc.name} ({name}) RSS: {stack.rss_start_mib:.0f} MiB after "
                  f"start-up, {st.rss_mib(stack.extproc.pid):.0f} MiB at the end")


def pick_variants(args: argparse.Namespace, learned_doc: dict[str, Any], work: Path
                  ) -> list[str]:
    variants = [v.strip() for v in args.only.split(",") if v.strip()]
    unknown = set(variants) - set(LABELS)
    if unknown:
        raise SystemExit(f"--only: unknown variants {sorted(unknown)}; use a,b,c,d,e")
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
                if raw is not None and v == "e" and c == E_HIGH:
                    batch = max(1, round(cell.batch_mean or 1))
                    texts_s = await asyncio.to_thread(raw.throughput, batch, seconds / 2)
                    run.raw[rnd].append((batch, texts_s))
    report(run, variants, args.rounds, stacks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    parser.add_argument("--e-duration", type=float, help="seconds per (e) cell (default: "
                        "--duration)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    parser.add_argument("--only", default="a,b,c,d,e", help="variants to run, e.g. a,b,c")
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
