"""Turns the router config's classifier and learned-signal settings into a classifier engine.

Slow (models load and warm up), so it runs once at start-up, off the event loop. Importing
torch is deferred to here so config validation and rendering stay fast.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import TYPE_CHECKING

from classifiers.api import (
    BatchingSettings,
    ClassifierSettings,
    LearnedSignalSpec,
    LongPromptSettings,
)
from extproc.config import RouterConfig
from extproc.context import needed_signals
from extproc.metrics import RouterMetrics
from extproc.signals.specs import LearnedSpec

if TYPE_CHECKING:
    from transformers.utils import logging as transformers_logging

    from classifiers.engine import SignalEngine

    # model loading prints progress bars to stderr; the router logs JSON lines instead
    transformers_logging.disable_progress_bar()


def classifier_settings(config: RouterConfig) -> ClassifierSettings:
    source = config.classifiers
    return ClassifierSettings(
        device=source.device,
        encoder=source.encoder,
        encoder_adapter=source.encoder_adapter,
        max_length=source.max_length,
        max_windows=source.max_windows,
        quantize_int8=source.quantize_int8,
        trace=source.trace,
        batching=BatchingSettings(**{
            **source.batching.model_dump(),
            "workers": 0 if source.batching.workers == "auto" else source.batching.workers,
        }),
        long_prompts=(
            None if source.long_prompts is None
            else LongPromptSettings(**source.long_prompts.model_dump())
        ),
    )


def learned_specs(config: RouterConfig) -> list[LearnedSignalSpec]:
    """Only the learned signals some decision references; the rest are never loaded."""
    needed = needed_signals(config)
    return [
        LearnedSignalSpec(
            name=s.name,
            kind=s.kind,  # type: ignore[arg-type]
            model=s.model,
            threshold=s.threshold,
            examples=s.examples,
            device=s.device,
            escalate_at=s.escalate_at,
        )
        for s in config.signals
        if isinstance(s, LearnedSpec) and s.name in needed
    ]


async def build_engine(
    config: RouterConfig, logger: logging.Logger, metrics: RouterMetrics
) -> SignalEngine | None:
    specs = learned_specs(config)
    if not specs:
        return None
    from transformers.utils import logging as transformers_logging

    from classifiers.engine import SignalEngine

    # model loading prints progress bars to stderr; the router logs JSON lines instead
    transformers_logging.disable_progress_bar()

    engine = await asyncio.to_thread(
        partial(
            SignalEngine.build, classifier_settings(config), specs,
            on_timing=metrics.classifier_timing, on_batch=metrics.classifier_batch,
            on_truncated=metrics.classifier_truncated,
            on_long=metrics.classifier_long_prompt, logger=logger,
        )
    )
    await engine.start()
    return engine
