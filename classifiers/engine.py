"""SignalEngine: builds every learned signal at start-up and evaluates texts on the hot path.

Constraints:
- Everything slow happens in `build` (device choice, one shared encoder load, heads, sequence and
  token models, one warm-up pass each); each classifier logs ONE JSON `model_binding_ready` line.
- `evaluate` never runs torch on the event loop: one request to the shared encoder queue feeds
  every requested domain/jailbreak/embedding signal; sequence/token signals go to their own
  model's queue concurrently. Every wait is bounded by `BatchingSettings.timeout_ms`.
- A missing default head, an unknown device or CUDA requested without a GPU fails `build` loudly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import ParamSpec

import torch

from classifiers.api import (
    SHARED_ENCODER_KINDS,
    Binding,
    ClassifierError,
    ClassifierSettings,
    ClassifierTimeout,
    DeviceError,
    LearnedSignalSpec,
    SignalScore,
)
from classifiers.batching import BatchCallback, BatchQueue, TimingCallback
from classifiers.device import default_dtype, dtype_name, resolve_device
from classifiers.encoder import BUNDLED_ADAPTER, Encoder, bundled_student_dir
from classifiers.heads import load_head, read_head_config
from classifiers.hf_models import HFModelRunner
from classifiers.lexical import LexicalFormatError, load_lexical
from classifiers.queues import classifier_queue
from classifiers.runners import (
    EncoderPath,
    EncoderRequest,
    LongCallback,
    LongPrompts,
    SharedEncoderRunner,
    TruncatedCallback,
)
from classifiers.signals import DomainSignal, EmbeddingSignal, JailbreakSignal, SharedSignal
from classifiers.tracing import log_trace_skipped

P = ParamSpec("P")
ENCODER_QUEUE = "encoder"  # `classifier` label of the shared encoder queue's timings/batches
LONG_HEADS = "long"  # a head directory's heads for the long-prompt encoder
MODELS_DIR = Path(__file__).resolve().parent / "models"

EncoderQueue = BatchQueue[EncoderRequest, dict[str, SignalScore]]
ModelQueue = BatchQueue[str, SignalScore]


BUNDLED_PREFIX = "bundled:"  # `model: bundled:harm` names `classifiers/models/harm`


def default_head_dir(kind: str) -> Path:
    """Bundled default head of a kind: `classifiers/models/<kind>`."""
    return MODELS_DIR / kind


def head_dir_of(model: str | None, kind: str) -> Path:
    """A head signal's directory: `model` as a path, `bundled:<name>` for a head shipped in
    `classifiers/models` (so a config names it wherever the package is installed), or unset
    for the kind's bundled default."""
    if model is None:
        return default_head_dir(kind)
    if model.startswith(BUNDLED_PREFIX):
        name = model.removeprefix(BUNDLED_PREFIX)
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name):
            raise ClassifierError(f"model {model!r}: a bundled head is named by [a-z0-9_-]")
        return MODELS_DIR / name
    return Path(model)


def _safe(callback: Callable[P, None] | None, logger: logging.Logger) -> Callable[P, None] | None:
    if callback is None:
        return None

    def call(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            callback(*args, **kwargs)
        except Exception:  # a metrics bug must not fail the batch
            logger.exception("classifier metrics callback failed for %s", args)

    return call


def _head_dir(spec: LearnedSignalSpec, long: bool) -> Path:
    """A domain/jailbreak signal's head directory (`long`: its `long/` head for the student)."""
    parent = head_dir_of(spec.model, spec.kind)
    return parent / LONG_HEADS if long else parent


def _missing_head(spec: LearnedSignalSpec, head_dir: Path, long: bool) -> str:
    if long:
        return (
            f"classifiers.long_prompts needs a head trained on the long-prompt encoder at "
            f"{head_dir}; train one there (`semantic-router train --adapter <student>`) or unset "
            "classifiers.long_prompts"
        )
    return f"no head at {head_dir} " + (
        "(the bundled default head is missing; train it with `semantic-router train` "
        "or set `model:` to a head directory)"
        if spec.model is None
        else ""
    )


def _load_head_signal(
    spec: LearnedSignalSpec, encoder: Encoder, logger: logging.Logger, long: bool = False
) -> SharedSignal:
    """`long`: the head in `<head dir>/long`, trained on the long-prompt (student) encoder;
    a domain head there uses its parent's lexical model unless it has its own."""
    head_dir = _head_dir(spec, long)
    if not (head_dir / "head.json").is_file():
        raise ClassifierError(
            f"{spec.kind} signal {spec.name!r}: {_missing_head(spec, head_dir, long)}"
        )
    config = read_head_config(head_dir)
    if int(config["input_dim"]) != encoder.dim or config.get("pooling", "mean") != "mean":
        raise ClassifierError(
            f"{spec.kind} signal {spec.name!r}: head {head_dir} expects a "
            f"{config['input_dim']}-d {config.get('pooling', 'mean')}-pooled embedding, "
            f"encoder {encoder.model_id} gives {encoder.dim}-d mean-pooled"
        )
    trained_adapter = str(config["encoder"]).partition("+")[2]
    running_adapter = encoder.model_id.partition("+")[2]
    if trained_adapter != running_adapter:
        # An adapter changes every embedding: a head on the wrong one answers confidently wrong.
        raise ClassifierError(
            f"{spec.kind} signal {spec.name!r}: head {head_dir} was trained on encoder "
            f"{config['encoder']!r} but the encoder is {encoder.model_id!r}; set "
            f"{'classifiers.long_prompts.' if long else 'classifiers.'}encoder_adapter to the "
            "adapter the head was trained with"
        )
    if config["encoder"] != encoder.model_id:
        # Same width but another encoder: usually a local copy of the same model, so warn only.
        logger.warning(
            json.dumps(
                {
                    "event": "head_encoder_mismatch",
                    "classifier": spec.name,
                    "head_encoder": config["encoder"],
                    "encoder": encoder.model_id,
                }
            )
        )
    head = load_head(head_dir).to(encoder.device, torch.float32).eval()
    if spec.kind == "domain":
        borrowed = long and not (head_dir / "lexical.json").is_file()
        try:
            lexical = load_lexical(head_dir.parent if borrowed else head_dir, head.labels)
        except LexicalFormatError as err:
            raise ClassifierError(f"{spec.kind} signal {spec.name!r}: {err}") from err
        return DomainSignal(spec.name, head, spec.threshold, lexical)
    return JailbreakSignal(spec.name, head, spec.threshold)


def _build_shared_signal(
    spec: LearnedSignalSpec, encoder: Encoder, logger: logging.Logger, long: bool = False
) -> tuple[SharedSignal, str]:
    """The signal and the model it names in its binding."""
    if spec.kind == "embedding":
        examples = {route: encoder.embed(list(texts)) for route, texts in spec.examples.items()}
        signal = EmbeddingSignal(spec.name, examples, spec.threshold, encoder.device)
        return signal, encoder.model_id
    return _load_head_signal(spec, encoder, logger, long), str(_head_dir(spec, long))


def _check_names(specs: Sequence[LearnedSignalSpec]) -> None:
    names = [spec.name for spec in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ClassifierError(f"duplicate learned signal names: {duplicates}")
    for spec in specs:
        if spec.kind in ("sequence", "token") and not spec.model:
            raise ClassifierError(f"{spec.kind} signal {spec.name!r} needs `model`")


class SignalEngine:
    """All learned signals of one router process (build once; start/close on the event loop)."""

    def __init__(
        self,
        encoder_queue: EncoderQueue | None,
        shared_names: frozenset[str],
        model_queues: Mapping[str, ModelQueue],
        bindings: tuple[Binding, ...],
    ) -> None:
        self._encoder_queue = encoder_queue
        self._shared_names = shared_names
        self._model_queues = dict(model_queues)
        self.names: frozenset[str] = shared_names | frozenset(model_queues)
        self.bindings = bindings

    @classmethod
    def build(
        cls,
        settings: ClassifierSettings,
        specs: Sequence[LearnedSignalSpec],
        *,
        on_timing: TimingCallback | None = None,
        on_batch: BatchCallback | None = None,
        on_truncated: TruncatedCallback | None = None,
        on_long: LongCallback | None = None,
        logger: logging.Logger | None = None,
    ) -> SignalEngine:
        """Load and warm up every classifier (slow; call at start-up, off the event loop)."""
        log = logger or logging.getLogger(__name__)
        _check_names(specs)
        truncated_cb = _safe(on_truncated, log)
        bindings: list[Binding] = []
        shared_specs = [s for s in specs if s.kind in SHARED_ENCODER_KINDS]
        encoder_queue: EncoderQueue | None = None
        if shared_specs:
            runner, shared_bindings = _build_shared(
                settings, shared_specs, truncated_cb, log, _safe(on_long, log)
            )
            encoder_queue = classifier_queue(
                ENCODER_QUEUE, runner, settings, shared_bindings[0].device, log,
                on_timing=on_timing, on_batch=on_batch,
            )
            bindings.extend(shared_bindings)
        model_queues: dict[str, ModelQueue] = {}
        for spec in specs:
            if spec.kind in SHARED_ENCODER_KINDS:
                continue
            model_runner, binding = _build_model(settings, spec, truncated_cb, log)
            model_queues[spec.name] = classifier_queue(
                spec.name, model_runner, settings, binding.device, log,
                on_timing=on_timing, on_batch=on_batch,
            )
            bindings.append(binding)
        for binding in bindings:
            fields = {
                "event": "model_binding_ready",
                "classifier": binding.classifier,
                "model": binding.model,
                "device": binding.device,
                "dtype": binding.dtype,
                "load_seconds": round(binding.load_seconds, 3),
                "execution": binding.execution,
            }
            # The message is the JSON line itself (plain formatters print it as is); the same
            # fields go in `extra` for JSON formatters that build their own object.
            log.info(json.dumps(fields), extra=fields)
        shared_names = frozenset(s.name for s in shared_specs)
        return cls(encoder_queue, shared_names, model_queues, tuple(bindings))

    def _queues(self) -> list[BatchQueue[str, SignalScore] | EncoderQueue]:
        queues: list[BatchQueue[str, SignalScore] | EncoderQueue] = list(
            self._model_queues.values()
        )
        if self._encoder_queue is not None:
            queues.append(self._encoder_queue)
        return queues

    async def start(self) -> None:
        """Start one worker thread per model, bound to the running loop."""
        for queue in self._queues():
            await queue.start()

    async def close(self) -> None:
        """Stop the workers; callers still waiting get `ClassifierError`."""
        await asyncio.gather(*(queue.close() for queue in self._queues()))

    async def evaluate(
        self, text: str, names: frozenset[str] | None = None, timeout_s: float | None = None
    ) -> dict[str, SignalScore]:
        """Scores of the requested learned signals (all when `names` is None) for `text`,
        waited for at most `timeout_s` (None: `BatchingSettings.timeout_ms`).

        Raises `Overloaded`, `ClassifierTimeout` or `ClassifierError`; `ValueError` for names
        that were never built (a configuration bug, not a runtime condition).
        """
        wanted = self.names if names is None else names
        if timeout_s is not None and timeout_s <= 0:  # no time left: never take a queue slot
            raise ClassifierTimeout("no time left for the classifiers")
        unknown = wanted - self.names
        if unknown:
            raise ValueError(f"unknown learned signals: {sorted(unknown)}")
        calls: list[Awaitable[dict[str, SignalScore]]] = []
        shared = wanted & self._shared_names
        if shared and self._encoder_queue is not None:
            calls.append(self._encoder_queue.submit(EncoderRequest(text, frozenset(shared)),
                                                    timeout_s))
        for name in sorted(wanted - self._shared_names):
            calls.append(_as_dict(name, self._model_queues[name].submit(text, timeout_s)))
        merged: dict[str, SignalScore] = {}
        errors: list[BaseException] = []
        for outcome in await _outcomes(calls):
            if isinstance(outcome, BaseException):
                errors.append(outcome)
            else:
                merged.update(outcome)
        if errors:
            first = errors[0]
            if isinstance(first, ClassifierError):
                raise first
            raise ClassifierError(f"classifier failed: {type(first).__name__}: {first}") from first
        return merged


async def _outcomes(
    calls: Sequence[Awaitable[dict[str, SignalScore]]],
) -> list[dict[str, SignalScore] | BaseException]:
    """Each call's result or exception; one call (the common case: the shared encoder alone)
    is awaited in place rather than wrapped in a task by `asyncio.gather`."""
    if len(calls) == 1:
        try:
            return [await calls[0]]
        except Exception as err:  # reported like gather's return_exceptions=True
            return [err]
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def _as_dict(name: str, score: Awaitable[SignalScore]) -> dict[str, SignalScore]:
    return {name: await score}


def _build_shared(
    settings: ClassifierSettings,
    specs: Sequence[LearnedSignalSpec],
    on_truncated: TruncatedCallback | None,
    log: logging.Logger,
    on_long: LongCallback | None = None,
) -> tuple[SharedEncoderRunner, list[Binding]]:
    """Load the shared encoder once, every head / example set on it, and warm them up."""
    device = resolve_device(settings.device)
    for spec in specs:
        wanted = resolve_device(settings.device, spec.device)
        if wanted != device:
            raise DeviceError(
                f"{spec.kind} signal {spec.name!r} asks for {wanted} but shares the encoder "
                f"on {device}; remove its device override or set classifiers.device"
            )
    quantize = settings.quantize_int8 and device.type == "cpu"
    started = time.perf_counter()
    encoder = Encoder.load(
        settings.encoder, device=str(device), max_length=settings.max_length, quantize=quantize,
        adapter=settings.encoder_adapter, trace=settings.traces(device.type),
    )
    encoder_seconds = time.perf_counter() - started
    log_trace_skipped(encoder.trace_skipped, "encoder", encoder.model_id, log)
    signals: dict[str, SharedSignal] = {}
    models: dict[str, tuple[str, float]] = {}
    for spec in specs:
        started = time.perf_counter()
        signals[spec.name], model = _build_shared_signal(spec, encoder, log)
        models[spec.name] = (model, time.perf_counter() - started)
    long: LongPrompts | None = None
    long_bindings: list[Binding] = []
    if settings.long_prompts is not None:
        if device.type == "cpu":
            long, long_bindings = _build_long(settings, specs, log)
        else:
            log.info(json.dumps({"event": "long_prompts_off", "device": str(device),
                                 "reason": "the full encoder scores every prompt on a GPU"}))
    runner = SharedEncoderRunner(
        encoder, signals, settings.max_windows, settings.batching.max_batch_size, on_truncated,
        long=long, on_long=on_long,
    )
    started = time.perf_counter()
    runner.warm_up()
    warm_seconds = time.perf_counter() - started
    dtype = "int8" if quantize else dtype_name(encoder.dtype)
    # Each shared classifier's load time includes the one encoder load and warm-up it relies on.
    return runner, [
        Binding(name, model, str(device), dtype, encoder_seconds + warm_seconds + seconds,
                encoder.execution)
        for name, (model, seconds) in models.items()
    ] + long_bindings


def _build_long(
    settings: ClassifierSettings, specs: Sequence[LearnedSignalSpec], log: logging.Logger
) -> tuple[LongPrompts, list[Binding]]:
    """The long-prompt path: the student encoder (CPU) and every shared signal's `long/` head;
    jailbreak signals escalate (see `LongPrompts`)."""
    long = settings.long_prompts
    assert long is not None
    adapter = long.encoder_adapter
    if adapter == BUNDLED_ADAPTER:
        if settings.encoder is not None:
            raise ClassifierError(
                "classifiers.long_prompts.encoder_adapter: `bundled` is a student of the bundled "
                "encoder; name a student directory for classifiers.encoder"
            )
        adapter = str(bundled_student_dir())
    started = time.perf_counter()
    try:
        student = Encoder.load(
            settings.encoder, device="cpu", max_length=settings.max_length,
            quantize=long.quantize_int8, adapter=adapter,
            trace=settings.traces("cpu"),
        )
    except (OSError, ValueError) as err:
        raise ClassifierError(f"classifiers.long_prompts: {err}") from err
    log_trace_skipped(student.trace_skipped, "student", student.model_id, log)
    signals: dict[str, SharedSignal] = {}
    bindings: list[Binding] = []
    dtype = "int8" if long.quantize_int8 else dtype_name(student.dtype)
    for spec in specs:
        signals[spec.name], model = _build_shared_signal(spec, student, log, long=True)
        seconds = time.perf_counter() - started
        bindings.append(Binding(f"{spec.name}/{LONG_HEADS}", model, "cpu", dtype, seconds,
                                student.execution))
    escalate = {
        spec.name: long.escalate_at if spec.escalate_at is None else spec.escalate_at
        for spec in specs if spec.kind == "jailbreak"
    }
    path = EncoderPath.of(student, signals)
    return LongPrompts(path, long.min_tokens, escalate), bindings


def _build_model(
    settings: ClassifierSettings,
    spec: LearnedSignalSpec,
    on_truncated: TruncatedCallback | None,
    log: logging.Logger,
) -> tuple[HFModelRunner, Binding]:
    """Load one sequence/token model on its own device and warm it up."""
    device = resolve_device(settings.device, spec.device)
    dtype = default_dtype(device)
    quantize = settings.quantize_int8 and device.type == "cpu"
    assert spec.model is not None  # checked by _check_names
    started = time.perf_counter()
    runner = HFModelRunner.load(
        spec.name,
        "sequence" if spec.kind == "sequence" else "token",
        spec.model,
        device=device,
        dtype=dtype,
        max_length=settings.max_length,
        max_windows=settings.max_windows,
        threshold=spec.threshold,
        chunk_size=settings.batching.max_batch_size,
        quantize=quantize,
        trace=settings.traces(device.type),
    )
    log_trace_skipped(runner.trace_skipped, spec.name, spec.model, log)
    runner.on_truncated = on_truncated
    runner.warm_up()
    seconds = time.perf_counter() - started
    return runner, Binding(spec.name, spec.model, str(device),
                           "int8" if quantize else dtype_name(dtype), seconds, runner.execution)
