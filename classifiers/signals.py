"""Signals computed from the shared encoder's window embeddings: domain, jailbreak, embedding.

Constraints: every signal works on a whole batch of window embeddings at once (`row_scores`,
one small matmul per batch; runs on the batching worker thread on the encoder's device), then
aggregates the windows of each text on CPU (`aggregate`):
  - domain: mean of window probabilities (mixed with the head's lexical model over the whole
    text, when it has one), top label; matched when its probability >= threshold;
  - jailbreak: max over windows of the attack probability; matched when >= threshold;
  - embedding: max cosine over windows per route, route cosine = max(prototype, best example).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import torch

from classifiers.api import ClassifierError, SignalScore
from classifiers.lexical import LexicalModel, mix_probs

# Label names that mean "not an attack" in a jailbreak head; any other label counts as an attack.
BENIGN_LABELS: frozenset[str] = frozenset({"benign", "safe", "normal", "negative", "clean"})
TOP_K = 3


class HeadModule(Protocol):
    """What the runtime needs from `classifiers.heads.Head`."""

    labels: tuple[str, ...]

    def __call__(self, emb: torch.Tensor) -> torch.Tensor: ...


class SharedSignal(Protocol):
    """A signal fed by the shared encoder."""

    name: str

    def row_scores(self, emb: torch.Tensor) -> torch.Tensor:
        """Per-window scores `[R, K]` (on the encoder device) for embeddings `[R, D]`."""
        ...

    def aggregate(
        self,
        rows: torch.Tensor,
        windows: int,
        truncated: bool,
        weights: torch.Tensor | None = None,
        text: str = "",
    ) -> SignalScore:
        """Combine the CPU score rows `[W, K]` of one text's windows into its `SignalScore`;
        `weights` `[W]` are the windows' token counts (None: equal); `text` is the text itself."""
        ...


def _top_labels(labels: Sequence[str], values: torch.Tensor) -> tuple[tuple[str, float], ...]:
    k = min(TOP_K, len(labels))
    top = torch.topk(values, k)
    return tuple((labels[int(i)], float(v)) for v, i in zip(top.values, top.indices, strict=True))


class DomainSignal:
    """Multi-class head; windows averaged in probability space, each weighted by its token
    count, so a short last window (the tail of a long prompt) does not get an equal vote. A head
    with a lexical companion (`classifiers.lexical`) mixes it in over the whole text."""

    def __init__(
        self, name: str, head: HeadModule, threshold: float, lexical: LexicalModel | None = None
    ) -> None:
        self.name = name
        self.head = head
        self.labels = head.labels
        self.threshold = threshold
        self.lexical = lexical

    def row_scores(self, emb: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.head(emb), dim=-1)

    def aggregate(
        self,
        rows: torch.Tensor,
        windows: int,
        truncated: bool,
        weights: torch.Tensor | None = None,
        text: str = "",
    ) -> SignalScore:
        if weights is None or len(rows) == 1:
            probs = rows.mean(dim=0)
        else:
            probs = (rows * weights.unsqueeze(1)).sum(dim=0) / weights.sum()
        if self.lexical is not None and self.lexical.mix > 0.0:
            probs = mix_probs(probs, self.lexical.log_probs(text), self.lexical.mix)
        best = int(torch.argmax(probs))
        score = float(probs[best])
        return SignalScore(
            name=self.name,
            label=self.labels[best],
            score=score,
            matched=score >= self.threshold,
            labels=_top_labels(self.labels, probs),
            windows=windows,
            truncated=truncated,
        )


class JailbreakSignal:
    """Binary (or attack-type) head; a text is as dangerous as its worst window."""

    def __init__(self, name: str, head: HeadModule, threshold: float) -> None:
        benign = [i for i, label in enumerate(head.labels) if label.lower() in BENIGN_LABELS]
        if len(benign) != 1:
            raise ClassifierError(
                f"jailbreak signal {name!r}: head labels {list(head.labels)} must contain "
                f"exactly one benign label (one of {sorted(BENIGN_LABELS)})"
            )
        self.name = name
        self.head = head
        self.threshold = threshold
        self.benign_index = benign[0]
        self.benign_label = head.labels[benign[0]]
        self.labels = head.labels

    def row_scores(self, emb: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.head(emb), dim=-1)
        attack = 1.0 - probs[:, self.benign_index : self.benign_index + 1]
        return torch.cat([attack, probs], dim=1)

    def aggregate(
        self,
        rows: torch.Tensor,
        windows: int,
        truncated: bool,
        weights: torch.Tensor | None = None,
        text: str = "",
    ) -> SignalScore:
        worst = int(torch.argmax(rows[:, 0]))
        score = float(rows[worst, 0])
        probs = rows[worst, 1:].clone()
        probs[self.benign_index] = -1.0  # the label names the most likely attack type
        matched = score >= self.threshold
        return SignalScore(
            name=self.name,
            label=self.labels[int(torch.argmax(probs))] if matched else self.benign_label,
            score=score,
            matched=matched,
            windows=windows,
            truncated=truncated,
        )


class EmbeddingSignal:
    """Similarity to example utterances per route (prototype and nearest example)."""

    def __init__(
        self,
        name: str,
        examples: Mapping[str, torch.Tensor],
        threshold: float,
        device: torch.device,
    ) -> None:
        if not examples or any(len(e) == 0 for e in examples.values()):
            raise ClassifierError(f"embedding signal {name!r} needs example utterances per route")
        self.name = name
        self.routes = tuple(examples)
        self.threshold = threshold
        stacked = [examples[r].float() for r in self.routes]
        self.prototypes = torch.nn.functional.normalize(
            torch.stack([e.mean(dim=0) for e in stacked]), dim=1
        ).to(device)
        self.examples = torch.cat(stacked).to(device)
        bounds: list[tuple[int, int]] = []
        start = 0
        for e in stacked:
            bounds.append((start, start + len(e)))
            start += len(e)
        self.bounds = tuple(bounds)

    def row_scores(self, emb: torch.Tensor) -> torch.Tensor:
        proto = emb @ self.prototypes.T
        per_example = emb @ self.examples.T
        nearest = torch.stack(
            [per_example[:, a:b].max(dim=1).values for a, b in self.bounds], dim=1
        )
        return torch.maximum(proto, nearest)

    def aggregate(
        self,
        rows: torch.Tensor,
        windows: int,
        truncated: bool,
        weights: torch.Tensor | None = None,
        text: str = "",
    ) -> SignalScore:
        cosines = rows.max(dim=0).values
        best = int(torch.argmax(cosines))
        score = float(cosines[best])
        return SignalScore(
            name=self.name,
            label=self.routes[best],
            score=score,
            matched=score >= self.threshold,
            labels=tuple((r, float(c)) for r, c in zip(self.routes, cosines, strict=True)),
            windows=windows,
            truncated=truncated,
        )
