"""Sequence and token classifiers with their own transformer (own device, own batching queue).

Constraints: loaded from a local HF model directory (or a hub id when a hub is reachable; set
HF_HUB_OFFLINE=1 where it is not); labels come from `config.id2label`. Batch functions run on a
`BatchQueue` worker thread under `torch.inference_mode`, over bounded token windows:
  - sequence: mean of window probabilities, top label; matched when its probability >= threshold;
  - token: entity types (B-/I- prefixes stripped, "O" ignored) of tokens whose predicted label
    probability >= threshold, in any window; score = best such probability.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from transformers import (
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    PreTrainedTokenizerBase,
)

from classifiers.api import SignalScore
from classifiers.batching import StageReporter
from classifiers.device import quantize_int8
from classifiers.runners import TruncatedCallback, forward_rows, pad_id_of, rows_by_owner
from classifiers.signals import TOP_K
from classifiers.tracing import HiddenStates, trace_model
from classifiers.windowing import load_tokenizer, split_windows

ModelKind = Literal["sequence", "token"]
_TAG_PREFIXES = ("B-", "I-", "E-", "S-", "L-", "U-")


def entity_type(label: str) -> str | None:
    """`B-PER` -> `PER`; `O` -> None."""
    if label.upper() == "O":
        return None
    for prefix in _TAG_PREFIXES:
        if label.upper().startswith(prefix):
            return label[len(prefix) :]
    return label


@dataclass
class HFModelRunner:
    """A sequence- or token-classification model and its batch function."""

    name: str
    kind: ModelKind
    tokenizer: PreTrainedTokenizerBase
    model: torch.nn.Module
    labels: tuple[str, ...]
    device: torch.device
    dtype: torch.dtype
    max_length: int
    max_windows: int
    threshold: float
    chunk_size: int
    on_truncated: TruncatedCallback | None = None
    traced: HiddenStates | None = None  # the checked TorchScript trace (logits), if any
    trace_skipped: str = ""  # why a requested trace is not used

    @property
    def execution(self) -> str:
        return "eager" if self.traced is None else "traced"

    @classmethod
    def load(
        cls,
        name: str,
        kind: ModelKind,
        path: str,
        *,
        device: torch.device,
        dtype: torch.dtype,
        max_length: int,
        max_windows: int,
        threshold: float,
        chunk_size: int,
        quantize: bool = False,
        trace: bool = False,
    ) -> HFModelRunner:
        """Load tokenizer + model onto `device` in `dtype` (int8-quantized on CPU if asked;
        a checked TorchScript trace of it with `trace`, see `classifiers.tracing`)."""
        tokenizer = load_tokenizer(path)
        auto = (
            AutoModelForSequenceClassification
            if kind == "sequence"
            else (AutoModelForTokenClassification)
        )
        model = auto.from_pretrained(path, dtype=dtype)
        model.eval()
        if quantize and device.type == "cpu":
            model = quantize_int8(model)
        model.to(device)
        config = model.config
        labels = tuple(str(config.id2label[i]) for i in range(int(config.num_labels)))
        limits = [max_length, int(getattr(tokenizer, "model_max_length", max_length))]
        positions = getattr(config, "max_position_embeddings", None)
        if isinstance(positions, int):
            limits.append(positions)
        traced = (trace_model(model, tokenizer, device, min(limits), dtype, "logits")
                  if trace else None)
        return cls(
            name=name,
            kind=kind,
            tokenizer=tokenizer,
            model=model,
            labels=labels,
            device=device,
            dtype=dtype,
            max_length=min(limits),
            max_windows=max_windows,
            threshold=threshold,
            chunk_size=chunk_size,
            traced=None if traced is None else traced.forward,
            trace_skipped="" if traced is None else traced.reason,
        )

    def _forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        inputs = {key: value.to(self.device) for key, value in batch.items()}
        if self.traced is not None:
            logits = self.traced(inputs).float()
        else:
            logits = self.model(**inputs).logits.float()
        probs = torch.softmax(logits, dim=-1)
        if self.kind == "token":
            # Padding and special tokens never name an entity: zero their probabilities.
            special = torch.tensor(self.tokenizer.all_special_ids, device=self.device)
            keep = inputs["attention_mask"].bool() & ~torch.isin(inputs["input_ids"], special)
            probs = probs * keep.unsqueeze(-1)
        return probs

    def __call__(self, texts: list[str], report: StageReporter) -> list[SignalScore]:
        started = time.perf_counter()
        windows = split_windows(self.tokenizer, texts, self.max_length, self.max_windows)
        tokenized = time.perf_counter()
        report("tokenize", tokenized - started)
        with torch.inference_mode():
            probs = forward_rows(
                windows, pad_id_of(self.tokenizer), self.chunk_size, self._forward
            ).cpu()
        report("inference", time.perf_counter() - tokenized)
        scores = []
        for i, rows in enumerate(rows_by_owner(windows)):
            window_probs = probs[torch.tensor(rows, dtype=torch.long)]
            count, truncated = windows.counts[i], windows.truncated[i]
            if self.kind == "sequence":
                scores.append(self._sequence_score(window_probs, count, truncated))
            else:
                scores.append(self._token_score(window_probs, count, truncated))
            if truncated and self.on_truncated is not None:
                self.on_truncated(self.name)
        return scores

    def _sequence_score(self, probs: torch.Tensor, count: int, truncated: bool) -> SignalScore:
        mean = probs.mean(dim=0)
        top = torch.topk(mean, min(TOP_K, len(self.labels)))
        best_label = self.labels[int(top.indices[0])]
        best = float(top.values[0])
        return SignalScore(
            name=self.name,
            label=best_label,
            score=best,
            matched=best >= self.threshold,
            labels=tuple(
                (self.labels[int(i)], float(v))
                for v, i in zip(top.values, top.indices, strict=True)
            ),
            windows=count,
            truncated=truncated,
        )

    def _token_score(self, probs: torch.Tensor, count: int, truncated: bool) -> SignalScore:
        best_prob, best_index = probs.max(dim=-1)  # [W, T]
        found: dict[str, float] = {}
        # best_prob > 0 excludes the zeroed padding/special tokens even with threshold 0.
        hits = ((best_prob >= self.threshold) & (best_prob > 0)).nonzero().tolist()
        for w, t in hits:
            kind = entity_type(self.labels[int(best_index[w, t])])
            if kind is not None:
                found[kind] = max(found.get(kind, 0.0), float(best_prob[w, t]))
        ranked: Sequence[tuple[str, float]] = sorted(found.items(), key=lambda kv: -kv[1])
        return SignalScore(
            name=self.name,
            label=ranked[0][0] if ranked else None,
            score=ranked[0][1] if ranked else 0.0,
            matched=bool(ranked),
            entities=tuple(kind for kind, _ in ranked),
            windows=count,
            truncated=truncated,
        )

    def warm_up(self) -> None:
        """One forward pass (start-up)."""
        self(["warm-up"], lambda stage, seconds: None)
