"""The shared encoder's raw batched throughput, in this process, for bench/overhead.py.

Built with the classifier engine's own builder from the same router config as variant (e), so
the batch function is exactly the one the router's queue calls: same encoder, heads, window
and chunk settings. torch is imported only here, only when (e) runs.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from pathlib import Path

from extproc.classifier_binding import classifier_settings, learned_specs
from extproc.config import RouterConfig


def missing_heads(config: RouterConfig) -> str | None:
    """Why the classifier variant cannot run (a bundled default head is absent), or None."""
    from classifiers.engine import default_head_dir

    for spec in learned_specs(config):
        if spec.kind in ("domain", "jailbreak"):
            head = Path(spec.model) if spec.model else default_head_dir(spec.kind)
            if not (head / "head.json").is_file():
                return f"{spec.kind} signal {spec.name!r}: no head at {head}"
    return None


def _no_report(stage: str, seconds: float) -> None:
    return None


class RawEncoder:
    """The router's shared-encoder batch function, called directly (no queue, no gRPC)."""

    def __init__(self, config: RouterConfig, texts: tuple[str, ...]) -> None:
        from classifiers.api import SHARED_ENCODER_KINDS
        from classifiers.engine import _build_shared  # the engine's builder: same runner
        from classifiers.runners import EncoderRequest
        from classifiers.threads import queue_threads

        specs = [s for s in learned_specs(config) if s.kind in SHARED_ENCODER_KINDS]
        if not specs:
            raise ValueError("the classifier config has no shared-encoder signal")
        settings = classifier_settings(config)
        self._runner, bindings = _build_shared(
            settings, specs, None, logging.getLogger("bench.raw_encoder")
        )
        self.device = bindings[0].device
        self._plan = queue_threads(self.device, settings.batching.workers)
        self._side = queue_threads(self.device, 0)  # auto's layout, measured in any case
        names = frozenset(s.name for s in specs)
        self._requests = [EncoderRequest(text, names) for text in texts]

    def throughput(self, batch: int, seconds: float) -> tuple[float, float | None]:
        """Texts/s at ``batch`` texts per call in the two ways a CPU queue runs batches
        (`classifiers.threads`): one call at a time on every thread (a lone batch, and every
        batch with `workers: 1`), and auto's workers side by side on one share of the threads
        each (under load; None where the budget has one thread or the device is a GPU). Both
        are measured whatever the router's setting, so the better one is the encoder's best."""
        alone = self._calls(batch, seconds / 2, 1, self._plan.threads)
        if self._side.workers < 2:
            return alone, None
        share = max(1, self._side.threads // self._side.workers)
        return alone, self._calls(batch, seconds / 2, self._side.workers, share)

    def _calls(self, batch: int, seconds: float, workers: int, threads: int) -> float:
        """Texts/s of ``workers`` threads each calling the runner on ``batch`` texts with
        ``threads`` intra-op threads: sum of batch / median call time (>= 5 calls each)."""
        items = [self._requests[i % len(self._requests)] for i in range(batch)]
        rates = [0.0] * workers

        def work(k: int) -> None:
            if self._plan.set_threads is not None:
                self._plan.set_threads(threads)
            self._runner(items, _no_report)
            times: list[float] = []
            end = time.perf_counter() + seconds
            while len(times) < 5 or time.perf_counter() < end:
                started = time.perf_counter()
                self._runner(items, _no_report)
                times.append(time.perf_counter() - started)
            rates[k] = batch / statistics.median(times)

        pool = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        return sum(rates)
