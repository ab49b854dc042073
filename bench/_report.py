"""Results of bench/overhead.py: cells, the table, the ratios and the PASS/FAIL lines.

Figures in the table are medians over rounds. Every ratio is computed within one round (both
sides measured minutes apart at most, under the same neighbours' load), then the median over
rounds is compared with its target.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from bench._load import LoadResult

LABELS = {
    "a": "Envoy, no ext_proc",
    "b": "Envoy + null ext_proc",
    "b1": "Envoy + null ext_proc, one message",
    "c": "router, explicit model",
    "d": "router, auto, keywords",
    "e": "router, auto, domain classifier",
}
E_HIGH = 32  # the concurrency of the (e) batching targets

PerRound = Callable[[int], float | None]


@dataclass
class Cell:
    variant: str
    concurrency: int
    round: int
    load: LoadResult
    extproc_us: float | None  # CPU µs per request of the ext_proc process (null or router)
    envoy_us: float
    backend_us: float
    batch_mean: float | None = None  # texts per encoder forward pass in the router
    degraded: int = 0  # learned requests unclassified or with a failed signal


@dataclass(frozen=True)
class RawFigures:
    """The raw encoder in-process at the router's batch size: texts/s of one call at a time
    on every thread, and of auto's workers side by side (None where it has one)."""

    batch: int
    one_call: float
    side_by_side: float | None

    @property
    def best(self) -> float:
        return max(self.one_call, self.side_by_side or 0.0)

    def __str__(self) -> str:
        side = self.side_by_side
        side_text = "" if side is None else f", workers side by side {side:.0f}"
        one = f"one call on every thread {self.one_call:.0f}"
        return f"batch {self.batch}: {one}{side_text} texts/s"


@dataclass
class Run:
    cells: list[Cell] = field(default_factory=list)
    # (round, concurrency of the (e) cell) -> the raw encoder in-process, right after it
    raw: dict[tuple[int, int], RawFigures] = field(default_factory=dict)

    def get(self, variant: str, concurrency: int, rnd: int) -> Cell | None:
        for cell in self.cells:
            if (cell.variant, cell.concurrency, cell.round) == (variant, concurrency, rnd):
                return cell
        return None

    def rps(self, variant: str, concurrency: int, rnd: int) -> float | None:
        cell = self.get(variant, concurrency, rnd)
        return cell.load.rps if cell is not None and cell.load.requests else None

    def p50(self, variant: str, concurrency: int, rnd: int) -> float | None:
        cell = self.get(variant, concurrency, rnd)
        return cell.load.p50_ms if cell is not None and cell.load.requests else None


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(run: Run, variants: list[str]) -> str:
    lines = [
        "| variant | c | req/s | p50 ms | p99 ms | errors | ext_proc CPU µs/req "
        "| front Envoy CPU µs/req | backend CPU µs/req | encoder batch |",
        "|" + "---|" * 10,
    ]
    for variant in variants:
        for c in sorted({cell.concurrency for cell in run.cells if cell.variant == variant}):
            cells = [x for x in run.cells if x.variant == variant and x.concurrency == c]
            ext = [x.extproc_us for x in cells if x.extproc_us is not None]
            batch = [x.batch_mean for x in cells if x.batch_mean is not None]
            errors = sum(x.load.errors + x.degraded for x in cells)
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


def _rps_ratio(run: Run, v: str, cv: int, w: str, cw: int) -> PerRound:
    def fn(r: int) -> float | None:
        x, y = run.rps(v, cv, r), run.rps(w, cw, r)
        return x / y if x is not None and y else None

    return fn


def _p50_added(run: Run, v: str, w: str) -> PerRound:
    def fn(r: int) -> float | None:
        x, y = run.p50(v, 1, r), run.p50(w, 1, r)
        return x - y if x is not None and y is not None else None

    return fn


def _raw_ratio(run: Run, c: int, best: bool) -> PerRound:
    """(e) req/s over the raw encoder's texts/s: its better layout, or one call at a time."""
    def fn(r: int) -> float | None:
        x, raw = run.rps("e", c, r), run.raw.get((r, c))
        if x is None or raw is None:
            return None
        return x / (raw.best if best else raw.one_call)

    return fn


Ratio = tuple[str, list[float], str, float | None]


def ratios(run: Run, rounds: int) -> list[Ratio]:
    """(name, per-round values, comparison, target); a None target is for information."""
    rows: list[tuple[str, PerRound, str, float | None]] = [
        ("(c)/(b) req/s at c=16", _rps_ratio(run, "c", 16, "b", 16), ">=", 0.8),
        ("(d)/(b) req/s at c=16", _rps_ratio(run, "d", 16, "b", 16), ">=", 0.8),
        ("(c) p50 - (b) p50 at c=1, ms", _p50_added(run, "c", "b"), "<=", 0.3),
        ("(d) p50 - (b) p50 at c=1, ms", _p50_added(run, "d", "b"), "<=", 0.3),
        (f"(e) c={E_HIGH} req/s / raw encoder texts/s at the router's batch size, better layout",
         _raw_ratio(run, E_HIGH, best=True), ">=", 0.8),
        (f"(e) c={E_HIGH} / (e) c=1 req/s", _rps_ratio(run, "e", E_HIGH, "e", 1), ">=", 2.0),
        ("(c)/(b1) req/s at c=16 (null ext_proc on the router's one-message routes)",
         _rps_ratio(run, "c", 16, "b1", 16), "", None),
        ("(d)/(b1) req/s at c=16", _rps_ratio(run, "d", 16, "b1", 16), "", None),
        ("(d) p50 - (b1) p50 at c=1, ms", _p50_added(run, "d", "b1"), "", None),
        ("(b1)/(b) req/s at c=16", _rps_ratio(run, "b1", 16, "b", 16), "", None),
        ("(b)/(a) req/s at c=16", _rps_ratio(run, "b", 16, "a", 16), "", None),
        ("(c)/(a) req/s at c=16", _rps_ratio(run, "c", 16, "a", 16), "", None),
        ("(b) p50 - (a) p50 at c=1, ms (the null ext_proc's own cost)",
         _p50_added(run, "b", "a"), "", None),
        (f"(e) c={E_HIGH} req/s / raw encoder texts/s at that batch size, one call at a time",
         _raw_ratio(run, E_HIGH, best=False), "", None),
        ("(e) c=1 req/s / raw encoder texts/s at batch 1, one call",
         _raw_ratio(run, 1, best=False), "", None),
    ]
    out: list[Ratio] = []
    for name, fn, op, target in rows:
        values = [v for v in (fn(r) for r in range(rounds)) if v is not None]
        out.append((name, values, op, target))
    return out


def verdicts(run: Run, rounds: int) -> list[str]:
    lines = []
    for name, values, op, target in ratios(run, rounds):
        if not values:
            lines.append(f"SKIP  {name}: not measured")
            continue
        value = statistics.median(values)
        shown = ", ".join(f"{v:.3f}" for v in values)
        if target is None:
            lines.append(f"info  {name} = {value:.3f} [{shown}]")
            continue
        ok = value >= target if op == ">=" else value <= target
        lines.append(f"{'PASS' if ok else 'FAIL'}  {name} = {value:.3f} [{shown}] "
                     f"(target {op} {target})")
    return lines


def report(run: Run, variants: list[str], rounds: int) -> None:
    print("\n" + table(run, variants))
    for (rnd, c), figures in sorted(run.raw.items()):
        print(f"raw encoder in-process, round {rnd}, paired with (e) c={c}: {figures}")
    print("\nratios (median over rounds; per-round values in brackets)")
    for line in verdicts(run, rounds):
        print(line)
