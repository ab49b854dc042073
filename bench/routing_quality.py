"""Routing quality on everyday prompts: the share of each category that lands on the expected
decision, through the router's own signal and decision code (`extproc.explain`, what
`semantic-router classify` runs), with every miss listed.

    python bench/routing_quality.py                                   # embedded defaults
    python bench/routing_quality.py --config my.yaml --data my.jsonl --misses 0

`bench/data/everyday_prompts.jsonl` (one object per line: `category`, `expect` (accepted
decision names), and `text` or chat `messages`) holds 319 chat-style prompts written for an
audit on 2026-11-30, never trained on: code and science questions as people type them,
general requests, jailbreaks and harmless look-alikes, PII and harmless numbers, follow-ups
and topic switches. The default keyword lists were extended after that audit (see
bench/RESULTS.md), so their categories read somewhat optimistic there;
`bench/data/everyday_prompts_heldout.jsonl` (166 prompts written afterwards, without seeing the
lists) was the held-out check until its misses were published; the sets written blind since,
`everyday_prompts_heldout2.jsonl` (300: code, reasoning, general, follow-ups),
`guard_prompts_heldout2.jsonl` (130: jailbreaks, PII and their harmless look-alikes; its
jailbreak and SSN misses have since been read), `guard_prompts_heldout3.jsonl` (150, the same
kinds, written later) and
`reasoning_prompts_heldout.jsonl` (240: word problems against general prompts with numbers)
and `guard_prompts_intl_heldout.jsonl` (160: attacks in twenty languages and emotional
framings, everyday prompts in those languages, PII in them), are the held-out checks now:
never tune on them. `guard_prompts_intl_tuning.jsonl` (written with it, the same kinds) and
`benign_intl_lookalikes.jsonl` (400 harmless prompts in twenty languages built to tempt the
guards) were read while writing `foreign_attacks`; `system_prompts_tuning.jsonl` (220 product
system prompts, 60 attacks in the system or developer message) while writing the
instruction guards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from extproc.config import load_config
from extproc.explain import Explainer

ROOT = Path(__file__).resolve().parent.parent


def _prompt(row: dict[str, Any]) -> str:
    if "text" in row:
        return str(row["text"])
    return " || ".join(str(m.get("content", "")) for m in row["messages"])


async def run(config_path: str, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str]]:
    explainer = await Explainer.start(load_config(config_path), logging.getLogger("bench"))
    try:
        outcomes = []
        for row in rows:
            messages = row.get("messages") or [{"role": "user", "content": row["text"]}]
            outcomes.append((row, (await explainer.explain_messages(messages)).outcome.decision))
        return outcomes
    finally:
        await explainer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "config" / "default.yaml"))
    parser.add_argument("--data", default=str(ROOT / "bench" / "data" / "everyday_prompts.jsonl"))
    parser.add_argument("--misses", type=int, default=12, help="misses listed per category")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    rows = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line]
    started = time.perf_counter()
    outcomes = asyncio.run(run(args.config, rows))
    by_category: dict[str, list[tuple[dict[str, Any], str]]] = defaultdict(list)
    for row, decision in outcomes:
        by_category[row["category"]].append((row, decision))
    print(f"{len(rows)} prompts, config {args.config}, {time.perf_counter() - started:.0f} s")
    print("\n| category | expected decision | as expected |\n|---|---|---|")
    for category, items in by_category.items():
        expected = "/".join(sorted({e for row, _ in items for e in row["expect"]}))
        hits = sum(decision in row["expect"] for row, decision in items)
        print(f"| {category} | {expected} | {hits}/{len(items)} = {100 * hits / len(items):.0f}% |")
    for category, items in by_category.items():
        misses = [(row, decision) for row, decision in items if decision not in row["expect"]]
        for row, decision in misses[: args.misses]:
            print(f"miss {category}: -> {decision}: {_prompt(row)[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
