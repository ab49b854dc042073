"""Keyword signal cost: every keyword and regex list of a config, with and without the literal
gate (``extproc.signals.literals``), measured side by side in one run.

Run: ``.venv/bin/python bench/keyword_cost.py [--config FILE]``. Prints ms per text for a chat
prompt and a 3.4 KB prompt (best of a few bounded rounds), per signal and in total, and the
gate's speed-up. Not a test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from extproc.config import load_config
from extproc.signals.specs import KeywordSpec

ROUNDS = 5
TEXTS = {
    "chat prompt": ("Can you help me write a polite email to my landlord about the broken "
                    "heater?", 400),
    "3.4 KB prompt": (("The quarterly report covers revenue growth, hiring plans and the "
                       "office move. " * 45)[:3400], 20),
}


def per_text_ms(specs: list[KeywordSpec], text: str, loops: int) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(loops):
            for spec in specs:
                spec.evaluate(text)
        best = min(best, (time.perf_counter() - started) / loops * 1000)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="config/default.yaml")
    args = parser.parse_args()
    specs = [s for s in load_config(args.config).signals if isinstance(s, KeywordSpec)]
    plain = [dataclasses.replace(s, gate=None) for s in specs]
    print(f"{len(specs)} keyword signals, {sum(s.gate is not None for s in specs)} gated")
    print(f"| signal | {' | '.join(f'{n} gated / ungated ms' for n in TEXTS)} |")
    print(f"|---|{'---|' * len(TEXTS)}")
    for spec, ungated in zip(specs, plain, strict=True):
        cells = [f"{per_text_ms([spec], t, n):.3f} / {per_text_ms([ungated], t, n):.3f}"
                 for t, n in TEXTS.values()]
        print(f"| {spec.name} | {' | '.join(cells)} |")
    for name, (text, loops) in TEXTS.items():
        gated, ungated = per_text_ms(specs, text, loops), per_text_ms(plain, text, loops)
        print(f"all signals, {name}: {gated:.3f} ms gated, {ungated:.3f} ms ungated, "
              f"gate speed-up {ungated / gated:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
