"""Public types of the classifier runtime: settings, signal specs, scores and the error tree.

Constraints: pure dataclasses and exceptions only -- no torch, no grpc, nothing from `extproc/` --
so the router can import these names without paying for model imports. Everything here is frozen:
the engine compiles settings at start-up and the hot path only reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

SignalKind = Literal["domain", "jailbreak", "embedding", "sequence", "token"]
SHARED_ENCODER_KINDS: frozenset[str] = frozenset({"domain", "jailbreak", "embedding"})


@dataclass(frozen=True)
class BatchingSettings:
    """Bounds of one batching queue; every wait is bounded by `timeout_ms`. `workers`: worker
    threads of a CPU queue (0 = auto, see `classifiers.threads`); a GPU queue has one."""

    max_batch_size: int = 32
    max_wait_ms: float = 2.0
    max_queue: int = 512
    timeout_ms: float = 2000.0
    workers: int = 0


@dataclass(frozen=True)
class LongPromptSettings:
    """A faster encoder for long prompts on CPU (`classifiers.long_prompts`).

    A text of at least `min_tokens` tokens is scored by `encoder_adapter` (`bundled` = the
    two-layer student in `classifiers/models/encoder-student`, or a student directory) with the
    heads in each head directory's `long/`; shorter texts keep the full encoder. A long text whose
    jailbreak score from the student is at least `escalate_at` is scored again by the full
    encoder, whose scores count. Used only when the shared encoder runs on CPU: on a GPU every
    text gets the full encoder.
    """

    min_tokens: int = 192
    encoder_adapter: str = "bundled"
    quantize_int8: bool = True
    escalate_at: float = 0.5


@dataclass(frozen=True)
class ClassifierSettings:
    """Process-wide classifier settings (`classifiers:` in the router config).

    `encoder`: None = bundled all-MiniLM-L6-v2. `encoder_adapter`: `bundled` = the LoRA adapter
    the default heads were trained with (bundled encoder only), a directory, or None.
    `max_length`: tokens per window.
    `quantize_int8`: dynamic int8 Linear layers, CPU only (ignored on CUDA); off by default because
    it loses accuracy (embedding cosine vs fp32 ~0.92) and only helps at larger CPU batches.
    `trace`: which models (shared encoders, the student, sequence/token models) run as checked
    TorchScript traces (`classifiers.tracing`): `cpu` (those on CPU), `always` (CUDA too) or
    `never`.
    """

    device: str = "auto"
    encoder: str | None = None
    encoder_adapter: str | None = "bundled"
    max_length: int = 256
    max_windows: int = 8
    quantize_int8: bool = False
    trace: str = "cpu"
    batching: BatchingSettings = field(default_factory=BatchingSettings)
    long_prompts: LongPromptSettings | None = None

    def traces(self, device_type: str) -> bool:
        """Whether a model on a `device_type` (`cpu`, `cuda`) device runs as a trace."""
        return self.trace == "always" or (self.trace == "cpu" and device_type == "cpu")


@dataclass(frozen=True)
class LearnedSignalSpec:
    """One learned signal.

    `model`: for domain/jailbreak a head directory (None = the bundled default head under
    `classifiers/models/<kind>`); for sequence/token a local HF model dir or hub id, which gets its
    own model and batching queue. `examples` (embedding only) maps route label -> utterances.
    """

    name: str
    kind: SignalKind
    model: str | None = None
    threshold: float = 0.5
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    device: str | None = None
    escalate_at: float | None = None  # jailbreak kind: see LongPromptSettings.escalate_at


@dataclass(frozen=True)
class SignalScore:
    """Result of one signal for one text.

    `labels`: top-3 (label, prob) for domain/sequence, per-route cosine for embedding.
    `entities`: entity types found by a token classifier. `windows`: how many token windows were
    scored; `truncated`: windows beyond `max_windows` were dropped.
    """

    name: str
    label: str | None
    score: float
    matched: bool
    labels: tuple[tuple[str, float], ...] = ()
    entities: tuple[str, ...] = ()
    windows: int = 1
    truncated: bool = False


@dataclass(frozen=True)
class Binding:
    """Where a classifier ended up at start-up (also logged as `model_binding_ready`)."""

    classifier: str
    model: str
    device: str
    dtype: str
    load_seconds: float
    execution: str = "eager"  # `traced` when a checked TorchScript trace runs


class ClassifierError(Exception):
    """Any failure to classify; the router maps it once at its edge."""


class Overloaded(ClassifierError):
    """A batching queue is full; the request was not enqueued."""


class ClassifierTimeout(ClassifierError):
    """A request did not get its result within the configured timeout."""


class DeviceError(ClassifierError):
    """The requested device is invalid or not present (never silently replaced by CPU)."""
