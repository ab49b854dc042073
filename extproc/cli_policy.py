"""``semantic-router classify``, ``eval`` and ``calibrate``: the routing-policy tools."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from extproc.config import RouterConfig
from extproc.errors import BadRequest

Loader = Callable[[str | None], RouterConfig]


class InputError(Exception):
    """A data or messages file the tools cannot use; ``main`` prints it and exits 1."""


def _known_signal(config: RouterConfig, name: str | None) -> str | None:
    names = [spec.name for spec in config.signals]
    if name is not None and name not in names:
        raise InputError(f"--signal: unknown signal '{name}' (configured: "
                         f"{', '.join(names) or 'none'})")
    return name


def _read_messages(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(f"--messages {path}: {err}") from err


def add_commands(commands: Any, load: Loader) -> None:
    classify = commands.add_parser("classify", help="show signals, decisions and the model "
                                   "chosen for a prompt")
    classify.add_argument("--config", "-c", help="router config YAML (default: embedded)")
    classify.add_argument("prompt", nargs="?", help="the user's message")
    classify.add_argument("--messages", help="a JSON file holding an OpenAI messages array")
    classify.add_argument("--json", action="store_true", help="print JSON")
    classify.set_defaults(func=lambda a: _classify(a, load(a.config)))

    evaluate = commands.add_parser("eval", help="run a labelled JSONL set through the router")
    evaluate.add_argument("--config", "-c", help="router config YAML (default: embedded)")
    evaluate.add_argument("--data", required=True, help="labelled JSONL file")
    evaluate.add_argument("--signal", help="signal whose label is compared with 'label' "
                          "(default: the first domain signal)")
    evaluate.add_argument("--json", action="store_true", help="print the report as JSON")
    evaluate.add_argument("--plot", help="write the confusion matrix to this PNG")
    evaluate.set_defaults(func=lambda a: _eval(a, load(a.config)))

    calibrate = commands.add_parser("calibrate", help="suggest a threshold for a signal "
                                    "from a labelled set")
    calibrate.add_argument("--config", "-c", help="router config YAML (default: embedded)")
    calibrate.add_argument("--data", required=True, help="labelled JSONL file")
    calibrate.add_argument("--signal", required=True, help="e.g. the jailbreak signal's name")
    calibrate.add_argument("--positive", default="jailbreak",
                           help="the label that should match (default: jailbreak)")
    calibrate.add_argument("--target-fpr", type=float, default=0.02,
                           help="highest acceptable false-positive rate (default 0.02)")
    calibrate.add_argument("--json", action="store_true", help="print JSON")
    calibrate.set_defaults(func=lambda a: _calibrate(a, load(a.config)))


def _quiet_start(config: RouterConfig) -> Any:
    import logging

    from extproc.explain import Explainer

    logger = logging.getLogger("semantic_router.tools")
    logger.setLevel(logging.WARNING)
    return Explainer.start(config, logger)


def _classify(args: argparse.Namespace, config: RouterConfig) -> int:
    from extproc.explain import format_explanation

    if args.messages:
        messages = _read_messages(args.messages)
    elif args.prompt is not None:
        messages = [{"role": "user", "content": args.prompt}]
    else:
        print("error: give a prompt or --messages FILE", file=sys.stderr)
        return 2

    async def run() -> Any:
        explainer = await _quiet_start(config)
        try:
            return await explainer.explain_messages(messages)
        finally:
            await explainer.close()

    try:
        explanation = asyncio.run(run())
    except BadRequest as err:
        raise InputError(f"{args.messages or 'prompt'}: {err.message}") from err
    print(json.dumps(explanation.as_dict(), indent=2) if args.json
          else format_explanation(explanation))
    return 0


def _run_set(config: RouterConfig, data: str) -> tuple[Any, Any]:
    from extproc.evaluation import load_examples, run_examples

    try:
        examples = load_examples(data)
    except (OSError, ValueError) as err:
        raise InputError(str(err)) from err  # names the file (and the line)

    async def run() -> Any:
        explainer = await _quiet_start(config)
        try:
            return await run_examples(explainer, examples)
        finally:
            await explainer.close()

    try:
        return examples, asyncio.run(run())
    except BadRequest as err:
        raise InputError(f"--data {data}: {err.message}") from err


def _eval(args: argparse.Namespace, config: RouterConfig) -> int:
    from extproc.evaluation import build_report, default_signal, format_report, plot_confusion

    signal = _known_signal(config, args.signal) or default_signal(config)
    examples, explanations = _run_set(config, args.data)
    report = build_report(examples, explanations, signal)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    if args.plot:
        try:
            plot_confusion(report, args.plot)
        except OSError as err:
            raise InputError(f"--plot: {err}") from err
        if not args.json:
            print(f"confusion matrix written to {args.plot}")
    return 0


def _calibrate(args: argparse.Namespace, config: RouterConfig) -> int:
    from extproc.evaluation import calibrate

    _known_signal(config, args.signal)
    examples, explanations = _run_set(config, args.data)
    try:
        result = calibrate(examples, explanations, args.signal, args.positive, args.target_fpr)
    except ValueError as err:
        raise InputError(f"--data {args.data}: {err}") from err
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"signal {result['signal']}: {result['positives']} positive, "
          f"{result['negatives']} negative examples")
    print(f"{'threshold':>9} {'recall':>7} {'fpr':>7} {'precision':>9}")
    for row in result["tradeoff"]:
        print(f"{row['threshold']:>9.4f} {row['recall']:>7.4f} {row['fpr']:>7.4f} "
              f"{row['precision']:>9.4f}")
    best = result["suggested"]
    if best is None:
        print(f"no threshold keeps the false-positive rate at or below {args.target_fpr}")
        return 1
    print(f"suggested threshold {best['threshold']}: recall {best['recall']}, "
          f"false-positive rate {best['fpr']} (target <= {args.target_fpr})")
    return 0
