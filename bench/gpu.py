"""Full-decision latency and throughput on a GPU host (an H200 is the reference), one
self-contained script; `--device cpu` runs it as a smoke test anywhere.

Prints the `model_binding_ready` lines (they must say `cuda:0` on a GPU host), then, through
the router's own signal and decision code with the embedded defaults (domain + jailbreak
heads on the shared encoder, structured PII, keywords):
- decision latency at batch 1 for a ~512-token prompt (target on GPU: p50 <= 5 ms; on this
  project's 2-core CPU machine the issue's target is p50 <= 50 ms for 500 tokens);
- batched throughput with many concurrent requests (target on GPU: >= 2,000 decisions/s).
Bounded: every phase stops after its request count or its time limit, whichever comes first.

    python bench/gpu.py                 # on the GPU host
    python bench/gpu.py --trace always  # the same with the encoder as a TorchScript trace
    python bench/gpu.py --device cpu    # smoke test
    python bench/gpu.py --host-only     # the encoder's forward pass skipped (see below)

The `model_binding_ready` lines name each encoder's `execution` (`traced` or `eager`).

`--host-only` replaces the shared encoder's forward pass by zeros of the right shape (the
decisions are then meaningless): what is left is the host's own work per decision (tokenizing,
windows, heads, the lexical model, PII, keywords, the event loop), so its throughput is the
ceiling any accelerator can reach in one router process on this host's CPU. The forward pass
still runs once per batch on the chosen device's tensors, so the rest of the path is unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from extproc.config import load_config
from extproc.explain import Explainer

ROOT = Path(__file__).resolve().parent.parent
PARAGRAPH = (
    "I am preparing a design review for our payments service and want a second opinion on the "
    "retry policy, the idempotency keys and how we reconcile ledger entries after a partial "
    "outage. The service is written in Python with asyncio, talks to Postgres through a "
    "connection pool, and publishes events to Kafka. Last quarter we saw duplicate charges "
    "when a downstream timeout fired after the charge had been committed. "
)


def long_prompt(tokens: int) -> str:
    words = PARAGRAPH.split()
    out: list[str] = []
    while len(out) < int(tokens * 0.75):  # about 4 words per 3 tokens for English prose
        out.extend(words)
    return " ".join(out[: int(tokens * 0.75)]) + " What would you change first?"


async def latency(explainer: Explainer, text: str, count: int, limit_s: float) -> list[float]:
    samples: list[float] = []
    deadline = time.perf_counter() + limit_s
    while len(samples) < count and time.perf_counter() < deadline:
        started = time.perf_counter()
        await explainer.explain_text(text)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def throughput(explainer: Explainer, text: str, concurrency: int, count: int,
                     limit_s: float) -> tuple[int, int, float]:
    """(complete decisions, decisions with a failed signal, seconds): a decision whose
    classifier timed out or was refused is not counted as throughput."""
    done = failed = 0
    deadline = time.perf_counter() + limit_s

    async def worker() -> None:
        nonlocal done, failed
        while done + failed < count and time.perf_counter() < deadline:
            result = await explainer.explain_text(text)
            if any(signal.error for signal in result.signals.values()):
                failed += 1
            else:
                done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, failed, time.perf_counter() - started


def skip_forward_pass() -> None:
    """`--host-only`: the shared encoder's forward pass returns zeros (no transformer)."""
    import torch

    from classifiers.encoder import Encoder

    def zeros(self: Encoder, encoding: dict[str, torch.Tensor]) -> torch.Tensor:
        rows = encoding["input_ids"].shape[0]
        return torch.zeros((rows, self.dim), device=self.device)

    Encoder.forward = zeros  # type: ignore[method-assign,assignment]


async def main(args: argparse.Namespace) -> int:
    os.environ["SEMANTIC_ROUTER_DEVICE"] = args.device
    if args.host_only:
        skip_forward_pass()
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    for noisy in ("httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    config = load_config(args.config)
    if args.trace:
        traced = config.classifiers.model_copy(update={"trace": args.trace})
        config = dataclasses.replace(config, classifiers=traced)
    explainer = await Explainer.start(config, logging.getLogger("bench.gpu"))
    logging.getLogger("bench.gpu").setLevel(logging.WARNING)
    try:
        text = long_prompt(args.tokens)
        for _ in range(5):  # warm caches and kernels
            await explainer.explain_text(text)
        samples = await latency(explainer, text, args.requests, args.seconds)
        done, failed, elapsed = await throughput(explainer, text, args.concurrency,
                                                 args.requests * 10, args.seconds)
        by_length = {}
        for tokens in args.sweep:
            other = long_prompt(tokens)
            await explainer.explain_text(other)
            by_length[tokens] = await latency(explainer, other, args.requests, args.seconds / 4)
    finally:
        await explainer.close()
    p50 = statistics.median(samples)
    p99 = sorted(samples)[min(len(samples) - 1, int(0.99 * len(samples)))]
    rate = done / elapsed if elapsed else 0.0
    print()
    print(f"device {args.device}, prompt ~{args.tokens} tokens, config {args.config}, "
          f"trace {args.trace or config.classifiers.trace}"
          + (", HOST ONLY: encoder forward pass skipped" if args.host_only else ""))
    print(f"{'measure':<42} {'value':>10}")
    print(f"{'decision latency batch 1, p50 (ms)':<42} {p50:>10.2f}")
    print(f"{'decision latency batch 1, p99 (ms)':<42} {p99:>10.2f}")
    print(f"{'samples':<42} {len(samples):>10}")
    print(f"{f'throughput at concurrency {args.concurrency} (decisions/s)':<42} {rate:>10.1f}")
    print(f"{'decisions with a failed signal (not counted)':<42} {failed:>10}")
    for tokens, runs in by_length.items():
        print(f"{f'  p50 at ~{tokens} tokens (ms)':<42} {statistics.median(runs):>10.2f}")
    if args.host_only:  # a ceiling, not a decision benchmark: no targets apply
        print("host-only run: no targets checked")
        return 0 if failed == 0 else 1
    gpu = args.device.startswith("cuda")
    latency_target = 5.0 if gpu else 50.0
    checks = [(f"p50 <= {latency_target:g} ms", p50 <= latency_target)]
    if gpu:
        checks.append(("throughput >= 2000 decisions/s", rate >= 2000))
    checks.append(("no failed signals", failed == 0))
    for name, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    return 0 if all(ok for _, ok in checks) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--config", default=str(ROOT / "config" / "default.yaml"))
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--trace", choices=["cpu", "always", "never"],
                        help="override classifiers.trace (default: the config's)")
    parser.add_argument(
        "--sweep", type=lambda v: [int(n) for n in v.split(",") if n], default=[],
        help="also print p50 latency at these prompt lengths, e.g. 64,128,256,1024",
    )
    parser.add_argument("--host-only", action="store_true",
                        help="skip the encoder's forward pass: the host's ceiling (see above)")
    parser.add_argument("--requests", type=int, default=200, help="latency samples")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0, help="limit per phase")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
