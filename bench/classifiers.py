"""Classifier runtime benchmark: prints throughput, batching, head and queue costs in one run.

Not a test. Bounded: every measurement runs for about `--seconds` (at least 3 iterations), so a
run takes roughly 10 x `--seconds` plus model loads. Measures, on one device:
  1. encoder texts/s at batch 1 and at the batch sizes the queue reaches under N concurrent callers;
  2. one encoder pass feeding 3 heads vs 1 head (target <= 1.1x);
  3. per-request latency through the batching queue vs the raw batch-1 forward (target <= +10%);
  4. int8 dynamic quantization vs fp32 (CPU only): speed and embedding agreement;
  5. the encoder as a TorchScript trace (`classifiers.trace`, as the router runs it) vs eager.

Usage: HF_HUB_OFFLINE=1 python bench/classifiers.py [--device cpu|cuda] [--long] [--seconds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Run as `python bench/classifiers.py`, this folder is first on sys.path and this file's name
# would shadow the `classifiers` package; the repository root must come first instead.
if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

import torch

from classifiers.api import BatchingSettings, ClassifierSettings
from classifiers.batching import BatchQueue
from classifiers.device import resolve_device
from classifiers.encoder import Encoder
from classifiers.heads import Head, HeadSpec
from classifiers.runners import EncoderRequest, SharedEncoderRunner
from classifiers.signals import DomainSignal, EmbeddingSignal, JailbreakSignal, SharedSignal

WORDS = (
    "the", "model", "should", "route", "this", "request", "to", "a", "backend", "that", "knows",
    "about", "tax", "law", "contracts", "python", "code", "integrals", "derivatives", "weather",
    "forecasts", "recipes", "travel", "plans", "and", "history",
)
DOMAINS = tuple(f"domain_{i}" for i in range(14))


@dataclass
class Row:
    name: str
    value: float
    unit: str


def prompt(rng: random.Random, tokens: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(tokens))


def paired(a: Callable[[], object], b: Callable[[], object], seconds: float) -> tuple[float, float]:
    """Median seconds of `a` and of `b`, called alternately so that load from other processes
    hits both equally (the ratio is what matters)."""
    a()
    b()
    times_a: list[float] = []
    times_b: list[float] = []
    end = time.perf_counter() + seconds
    while len(times_a) < 5 or time.perf_counter() < end:
        for fn, out in ((a, times_a), (b, times_b)):
            started = time.perf_counter()
            fn()
            out.append(time.perf_counter() - started)
    return statistics.median(times_a), statistics.median(times_b)


def build_signals(encoder: Encoder) -> dict[str, SharedSignal]:
    torch.manual_seed(0)
    dev = encoder.device
    domain = Head(HeadSpec("mlp", encoder.dim, DOMAINS, hidden_size=256)).to(dev).eval()
    jailbreak = Head(HeadSpec("linear", encoder.dim, ("benign", "jailbreak"))).to(dev).eval()
    routes = {r: encoder.embed([f"{r} example {i}" for i in range(8)]) for r in ("a", "b", "c")}
    return {
        "domain": DomainSignal("domain", domain, 0.5),
        "jailbreak": JailbreakSignal("jailbreak", jailbreak, 0.5),
        "routes": EmbeddingSignal("routes", routes, 0.5, dev),
    }


def no_report(stage: str, seconds: float) -> None:
    return None


async def queue_run(
    runner: SharedEncoderRunner, texts: list[str], callers: int, seconds: float,
    names: frozenset[str],
) -> tuple[float, list[int], list[float]]:
    """Closed loop of `callers` concurrent submitters; (texts/s, batch sizes, latencies)."""
    sizes: list[int] = []
    latencies: list[float] = []
    queue = BatchQueue(
        "encoder", runner, BatchingSettings(max_batch_size=32, timeout_ms=60_000),
        on_batch=lambda name, size: sizes.append(size),
    )
    await queue.start()
    end = time.perf_counter() + seconds

    async def caller(i: int) -> None:
        n = 0
        while time.perf_counter() < end or n == 0:
            started = time.perf_counter()
            await queue.submit(EncoderRequest(texts[(i + n) % len(texts)], names))
            latencies.append(time.perf_counter() - started)
            n += 1

    started = time.perf_counter()
    await asyncio.gather(*(caller(i) for i in range(callers)))
    elapsed = time.perf_counter() - started
    await queue.close()
    return len(latencies) / elapsed, sizes, latencies


async def queue_vs_raw(
    runner: SharedEncoderRunner, text: str, names: frozenset[str], seconds: float
) -> tuple[float, float]:
    """Median latency of the raw batch function and of a lone request through the queue,
    alternated. The raw call runs on the loop thread here only because nothing else waits."""
    queue = BatchQueue("encoder", runner, BatchingSettings(timeout_ms=60_000))
    await queue.start()
    request = EncoderRequest(text, names)
    raw: list[float] = []
    queued: list[float] = []
    end = time.perf_counter() + seconds
    await queue.submit(request)
    while len(raw) < 5 or time.perf_counter() < end:
        started = time.perf_counter()
        runner([request], no_report)
        raw.append(time.perf_counter() - started)
        started = time.perf_counter()
        await queue.submit(request)
        queued.append(time.perf_counter() - started)
    await queue.close()
    return statistics.median(raw), statistics.median(queued)


def bench_device(args: argparse.Namespace, rows: list[Row], ratios: list[tuple[str, float, str]]
                 ) -> str:
    """Fills `rows` and `ratios`; returns how the encoder ran (traced or eager, and why)."""
    device = resolve_device(args.device)
    rng = random.Random(0)
    tokens = 500 if args.long else 24
    texts = [prompt(rng, tokens) for _ in range(64)]
    traces = ClassifierSettings(trace=args.trace).traces(device.type)
    encoder = Encoder.load(device=str(device), max_length=args.max_length, trace=traces)
    signals = build_signals(encoder)
    all3 = frozenset(signals)
    one = frozenset({"domain"})
    runner = SharedEncoderRunner(encoder, signals, max_windows=8, chunk_size=32)

    def call(batch: list[str], names: frozenset[str]) -> Callable[[], object]:
        return lambda: runner([EncoderRequest(t, names) for t in batch], no_report)

    b1_one, b1_all = paired(call(texts[:1], one), call(texts[:1], all3), args.seconds)
    rows.append(Row("raw batch 1, 1 head: latency", b1_one * 1000, "ms"))
    rows.append(Row("raw batch 1, 1 head: throughput", 1 / b1_one, "texts/s"))
    rows.append(Row("raw batch 1, 3 heads: latency", b1_all * 1000, "ms"))

    rate, sizes, _ = asyncio.run(queue_run(runner, texts, args.callers, args.seconds, all3))
    typical = max(1, round(statistics.median(sizes)))
    rows.append(Row(f"queue, {args.callers} callers, 3 heads: throughput", rate, "texts/s"))
    rows.append(Row("queue batch size: median", statistics.median(sizes), "texts"))
    rows.append(Row("queue batch size: max", max(sizes), "texts"))
    bn_one, bn_all = paired(call(texts[:typical], one), call(texts[:typical], all3), args.seconds)
    rows.append(Row(f"raw batch {typical}, 1 head: throughput", typical / bn_one, "texts/s"))
    rows.append(Row(f"raw batch {typical}, 3 heads: throughput", typical / bn_all, "texts/s"))
    ratios.append(("3 heads / 1 head, batch 1 (target <= 1.10)", b1_all / b1_one, "x"))
    ratios.append((f"3 heads / 1 head, batch {typical} (target <= 1.10)", bn_all / bn_one, "x"))
    ratios.append((f"batch {typical} / batch 1 throughput", (typical / bn_one) * b1_one, "x"))

    # One caller at a time: the queue's cost over the raw forward for the same work.
    raw, queued = asyncio.run(queue_vs_raw(runner, texts[0], one, args.seconds))
    rows.append(Row("raw batch 1, 1 head (paired run): latency", raw * 1000, "ms"))
    rows.append(Row("queue batch 1, 1 caller: latency", queued * 1000, "ms"))
    ratios.append(("queue / raw latency at batch 1 (target <= 1.10)", queued / raw, "x"))

    if encoder.traced is not None:
        eager = Encoder.load(device=str(device), max_length=args.max_length)
        for batch in (1, typical):
            chunk = eager.tokenize(texts[:batch])
            e, t = paired(partial(eager.forward, chunk), partial(encoder.forward, chunk),
                          args.seconds)
            rows.append(Row(f"eager encoder batch {batch}: latency", e * 1000, "ms"))
            rows.append(Row(f"traced encoder batch {batch}: latency", t * 1000, "ms"))
            ratios.append((f"eager / traced latency, batch {batch} (>1 = trace faster)", e / t,
                           "x"))
    if device.type == "cpu":
        bench_int8(args, encoder, texts, rows, ratios)
    return f"{encoder.execution} {encoder.trace_skipped}".strip()


def bench_int8(args: argparse.Namespace, fp32: Encoder, texts: list[str], rows: list[Row],
               ratios: list[tuple[str, float, str]]) -> None:
    int8 = Encoder.load(device="cpu", max_length=args.max_length, quantize=True)
    def embed(encoder: Encoder, batch: int) -> Callable[[], object]:
        return lambda: encoder.embed(texts[:batch])

    for batch in (1, 16):
        f, q = paired(embed(fp32, batch), embed(int8, batch), args.seconds)
        rows.append(Row(f"fp32 encoder batch {batch}: throughput", batch / f, "texts/s"))
        rows.append(Row(f"int8 encoder batch {batch}: throughput", batch / q, "texts/s"))
        ratios.append((f"int8 / fp32 speed, batch {batch} (>1 = int8 faster)", f / q, "x"))
    agreement = (fp32.embed(texts[:16]) * int8.embed(texts[:16])).sum(dim=1)
    ratios.append(("int8 vs fp32 embedding cosine (min over 16 texts)", float(agreement.min()), ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N | auto")
    parser.add_argument("--long", action="store_true", help="500-token prompts instead of ~30")
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--callers", type=int, default=32, help="concurrent queue callers")
    parser.add_argument("--max-length", type=int, default=256, help="encoder window (tokens)")
    parser.add_argument("--trace", choices=["cpu", "always", "never"], default="cpu",
                        help="classifiers.trace for the encoder (default: the router's)")
    args = parser.parse_args()
    rows: list[Row] = []
    ratios: list[tuple[str, float, str]] = []
    execution = bench_device(args, rows, ratios)
    kind = "500-token" if args.long else "short"
    print(f"\nclassifier runtime on {args.device} ({kind} prompts, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, encoder {execution})")
    width = max(len(r.name) for r in rows)
    for row in rows:
        print(f"  {row.name:<{width}}  {row.value:>10.2f} {row.unit}")
    print("ratios")
    width = max(len(name) for name, _, _ in ratios)
    for name, value, unit in ratios:
        print(f"  {name:<{width}}  {value:>10.3f}{unit}")


if __name__ == "__main__":
    main()
