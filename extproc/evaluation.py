"""``semantic-router eval`` and ``calibrate``: labelled sets through the router's own code.

A labelled line is ``{"text" or "messages", "label"?, "expect_decision"?, "expect_model"?}``.
``label`` is compared with the label of one signal (``--signal``, default the first domain
signal); decisions and models with the final outcome.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extproc.config import RouterConfig
from extproc.errors import RouterError
from extproc.explain import Explainer, Explanation
from extproc.openai_request import Endpoint, parse_request
from extproc.signals.specs import LearnedSpec

_CONCURRENCY = 32  # enough to fill the classifier batches


@dataclass(frozen=True)
class Example:
    messages: tuple[dict[str, Any], ...]
    label: str | None
    expect_decision: str | None
    expect_model: str | None


def load_examples(path: str | Path) -> list[Example]:
    examples = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if "messages" in item:
                messages = tuple(item["messages"])
            else:
                messages = ({"role": "user", "content": str(item["text"])},)
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path}:{number}: needs 'text' or 'messages' ({err})") from err
        try:  # the router's own request checks, so a bad example names its line
            parse_request(json.dumps({"model": "auto", "messages": messages}).encode(),
                          Endpoint.CHAT)
        except RouterError as err:
            raise ValueError(f"{path}:{number}: {err.message}") from err
        examples.append(Example(messages, item.get("label"), item.get("expect_decision"),
                                item.get("expect_model")))
    if not examples:
        raise ValueError(f"{path}: no examples")
    return examples


def default_signal(config: RouterConfig) -> str | None:
    for spec in config.signals:
        if isinstance(spec, LearnedSpec) and spec.kind == "domain":
            return spec.name
    return None


async def run_examples(explainer: Explainer, examples: Sequence[Example]) -> list[Explanation]:
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def one(example: Example) -> Explanation:
        async with gate:
            return await explainer.explain_messages(example.messages)

    return list(await asyncio.gather(*(one(e) for e in examples)))


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def label_report(pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Accuracy, per-label precision/recall and the confusion matrix of (expected, got)."""
    labels = sorted({e for e, _ in pairs} | {g for _, g in pairs})
    confusion = {e: dict.fromkeys(labels, 0) for e in labels}
    for expected, got in pairs:
        confusion[expected][got] += 1
    per_label = {}
    for label in labels:
        tp = confusion[label][label]
        predicted = sum(confusion[e][label] for e in labels)
        actual = sum(confusion[label].values())
        per_label[label] = {
            "precision": round(tp / predicted, 4) if predicted else 0.0,
            "recall": round(tp / actual, 4) if actual else 0.0,
            "support": actual,
        }
    correct = sum(1 for e, g in pairs if e == g)
    return {"accuracy": round(correct / len(pairs), 4) if pairs else 0.0, "count": len(pairs),
            "labels": per_label, "confusion": confusion}


def build_report(examples: Sequence[Example], explanations: Sequence[Explanation],
                 signal: str | None) -> dict[str, Any]:
    report: dict[str, Any] = {"examples": len(examples)}
    labelled = [(e.label, x) for e, x in zip(examples, explanations, strict=True)
                if e.label is not None]
    if labelled and signal is not None:
        report["signal"] = signal
        report["label"] = label_report(
            [(str(label), str(x.signals[signal].label if signal in x.signals else None))
             for label, x in labelled])
    for key, field in (("decision", "expect_decision"), ("model", "expect_model")):
        pairs = [(getattr(e, field), getattr(x.outcome, key) or "blocked")
                 for e, x in zip(examples, explanations, strict=True)
                 if getattr(e, field) is not None]
        if pairs:
            report[key] = label_report(pairs)
    report["decisions"] = dict(Counter(x.outcome.decision for x in explanations).most_common())
    # failed signals are reported, never silently scored as wrong labels
    report["signal_errors"] = dict(Counter(
        f"{name}: {result.error}" for x in explanations
        for name, result in x.signals.items() if result.error).most_common())
    latencies = [x.seconds * 1000 for x in explanations]
    report["latency_ms"] = {q: round(_percentile(latencies, v), 3)
                            for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))}
    return report


def format_report(report: dict[str, Any]) -> str:
    lines = [f"examples: {report['examples']}"]
    for key in ("label", "decision", "model"):
        part = report.get(key)
        if part is None:
            continue
        title = f"signal '{report['signal']}' label" if key == "label" else key
        lines += ["", f"{title}: accuracy {part['accuracy']:.4f} over {part['count']}",
                  f"  {'label':<20} {'precision':>9} {'recall':>7} {'support':>8}"]
        for label, row in part["labels"].items():
            lines.append(f"  {label:<20} {row['precision']:>9.4f} {row['recall']:>7.4f} "
                         f"{row['support']:>8}")
        names = list(part["confusion"])
        lines += ["", "  confusion (rows: expected, columns: got)",
                  "  " + " " * 20 + " ".join(f"{n[:6]:>6}" for n in names)]
        for expected in names:
            counts = " ".join(f"{part['confusion'][expected][n]:>6}" for n in names)
            lines.append(f"  {expected[:20]:<20}{counts}")
    lines += ["", "decision distribution: " + ", ".join(
        f"{name} {count}" for name, count in report["decisions"].items())]
    if report["signal_errors"]:
        lines.append("signal errors (counted as the signal not matching): " + ", ".join(
            f"{name} x{count}" for name, count in report["signal_errors"].items()))
    latency = report["latency_ms"]
    lines.append(f"latency ms: p50 {latency['p50']}  p90 {latency['p90']}  p99 {latency['p99']}")
    return "\n".join(lines)


def plot_confusion(report: dict[str, Any], out: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise SystemExit("--plot needs matplotlib: pip install matplotlib") from err
    part = report.get("label") or report.get("decision") or report.get("model")
    if part is None:
        raise SystemExit("--plot: the data has no labels or expectations to plot")
    names = list(part["confusion"])
    grid = [[part["confusion"][e][g] for g in names] for e in names]
    size = max(4.0, 0.5 * len(names) + 2)
    figure, axes = plt.subplots(figsize=(size, size))
    axes.imshow(grid, cmap="Blues")
    axes.set_xticks(range(len(names)), names, rotation=60, ha="right")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel("predicted")
    axes.set_ylabel("expected")
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            if value:
                axes.text(j, i, str(value), ha="center", va="center", fontsize=8)
    axes.set_title(f"accuracy {part['accuracy']:.3f} (n={part['count']})")
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    plt.close(figure)


def calibrate(examples: Sequence[Example], explanations: Sequence[Explanation], signal: str,
              positive: str, target_fpr: float) -> dict[str, Any]:
    """Threshold suggestion for ``signal``: positives are examples labelled ``positive``.
    Scores are the signal's score (e.g. jailbreak probability)."""
    scored = [(x.signals[signal].score, e.label == positive)
              for e, x in zip(examples, explanations, strict=True)
              if e.label is not None and signal in x.signals]
    positives = sum(1 for _, p in scored if p)
    negatives = len(scored) - positives
    if not positives or not negatives:
        raise ValueError("calibration needs both positive and negative labelled examples")
    table = []
    for threshold in sorted({round(s, 4) for s, _ in scored} | {0.5}):
        tp = sum(1 for s, p in scored if p and s >= threshold)
        fp = sum(1 for s, p in scored if not p and s >= threshold)
        table.append({"threshold": threshold, "recall": round(tp / positives, 4),
                      "fpr": round(fp / negatives, 4),
                      "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0})
    within = [row for row in table if row["fpr"] <= target_fpr]
    best = max(within, key=lambda r: (r["recall"], -r["threshold"])) if within else None
    step = max(1, len(table) // 20)
    return {"signal": signal, "positive": positive, "positives": positives,
            "negatives": negatives, "target_fpr": target_fpr, "suggested": best,
            "tradeoff": table[::step]}
