"""Batch functions run by the batching worker threads: tokenize into windows, forward, score.

Constraints: called only on a `BatchQueue` worker thread (never the event loop), under
`torch.inference_mode`. Each call reports its `tokenize` and `inference` stage times. The shared
encoder runner does ONE encoder pass per batch and feeds every requested signal from it; each
text's windows are aggregated per signal (see `classifiers.signals`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from classifiers.api import SignalScore
from classifiers.batching import StageReporter
from classifiers.encoder import Encoder
from classifiers.signals import SharedSignal
from classifiers.windowing import Windows, length_sorted_chunks, pad_rows, split_windows

TruncatedCallback = Callable[[str], None]
LongCallback = Callable[[str, str], None]  # (signal, "student" | "escalated")


@dataclass(frozen=True)
class EncoderRequest:
    """One text and the shared-encoder signals wanted for it."""

    text: str
    signals: frozenset[str]


def rows_by_owner(windows: Windows) -> list[list[int]]:
    """Row indices of each text's windows."""
    owned: list[list[int]] = [[] for _ in windows.counts]
    for row, owner in enumerate(windows.owners):
        owned[owner].append(row)
    return owned


def forward_rows(
    windows: Windows,
    pad_id: int,
    chunk_size: int,
    forward: Callable[[dict[str, torch.Tensor]], torch.Tensor],
) -> torch.Tensor:
    """Run `forward` over all window rows in length-sorted chunks; outputs back in row order."""
    outputs: list[torch.Tensor] = []
    order: list[int] = []
    for chunk in length_sorted_chunks(windows, chunk_size):
        outputs.append(forward(pad_rows([windows.rows[i] for i in chunk], pad_id)))
        order.extend(chunk)
    if len(outputs) > 1 and outputs[0].dim() > 2:
        # token outputs [n, T, L]: each chunk was padded to its own T
        width = max(o.shape[1] for o in outputs)
        outputs = [torch.nn.functional.pad(o, (0, 0, 0, width - o.shape[1])) for o in outputs]
    stacked = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    if order == sorted(order):
        return stacked
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return stacked[inverse.to(stacked.device)]


def pad_id_of(tokenizer: PreTrainedTokenizerBase) -> int:
    """The tokenizer's pad id (0 for tokenizers without one: masked out anyway)."""
    pad = tokenizer.pad_token_id
    return int(pad) if isinstance(pad, int) else 0


@dataclass(frozen=True)
class EncoderPath:
    """One encoder and the signals' heads trained on its embeddings."""

    encoder: Encoder
    signals: Mapping[str, SharedSignal]
    pad_id: int

    @classmethod
    def of(cls, encoder: Encoder, signals: Mapping[str, SharedSignal]) -> EncoderPath:
        return cls(encoder, dict(signals), pad_id_of(encoder.tokenizer))


@dataclass(frozen=True)
class LongPrompts:
    """The long-prompt path: texts of at least `min_tokens` tokens are scored by `path` (a
    faster student encoder with its own heads). A text on which any `escalate` signal (the
    blocking ones: jailbreak and harm heads) scores at least that signal's value is scored
    again by the full encoder, whose scores then count, so the student alone never blocks a
    request."""

    path: EncoderPath
    min_tokens: int
    escalate: Mapping[str, float]


class SharedEncoderRunner:
    """Batch function of the shared encoder queue: texts -> scores of the requested signals.

    With `long` set, long texts go to its student path (see `LongPrompts`); both encoders share
    the tokenizer, so a batch is tokenized once. `on_long(signal, outcome)` counts texts the
    student scored (`student`) and those it sent on to the full encoder (`escalated`).
    """

    def __init__(
        self,
        encoder: Encoder,
        signals: Mapping[str, SharedSignal],
        max_windows: int,
        chunk_size: int,
        on_truncated: TruncatedCallback | None = None,
        *,
        long: LongPrompts | None = None,
        on_long: LongCallback | None = None,
    ) -> None:
        self.encoder = encoder
        self.signals = dict(signals)
        self.full = EncoderPath.of(encoder, self.signals)
        self.long = long
        self.max_windows = max_windows
        self.chunk_size = chunk_size
        self.on_truncated = on_truncated
        self.on_long = on_long

    def __call__(
        self, items: list[EncoderRequest], report: StageReporter
    ) -> list[dict[str, SignalScore]]:
        started = time.perf_counter()
        windows = self._split(items)
        tokenized = time.perf_counter()
        report("tokenize", tokenized - started)
        if self.long is None:
            results = self._score(items, windows, [(self.full, list(range(len(items))))])
        else:
            results = self._score_long_first(items, windows, self.long)
        report("inference", time.perf_counter() - tokenized)
        return results

    def _score_long_first(
        self, items: Sequence[EncoderRequest], windows: Windows, long: LongPrompts
    ) -> list[dict[str, SignalScore]]:
        """Short texts on the full encoder; long ones on the student, then the full encoder
        again for those an escalating signal flagged."""
        is_long = [n >= long.min_tokens for n in windows.tokens]
        short = [t for t, flag in enumerate(is_long) if not flag]
        longer = [t for t, flag in enumerate(is_long) if flag]
        results = self._score(items, windows, [(self.full, short), (long.path, longer)])
        escalated = [
            t for t in longer
            if any(s.score >= long.escalate[name]
                   for name, s in results[t].items() if name in long.escalate)
        ]
        if escalated:
            again = self._score(items, windows, [(self.full, escalated)])
            for t in escalated:
                results[t] = again[t]
        if self.on_long is not None:
            flagged = set(escalated)
            for t in longer:
                outcome = "escalated" if t in flagged else "student"
                for name in items[t].signals:
                    self.on_long(name, outcome)
        return results

    def _split(self, items: Sequence[EncoderRequest]) -> Windows:
        return split_windows(
            self.encoder.tokenizer,
            [item.text for item in items],
            self.encoder.max_length,
            self.max_windows,
        )

    def _score(
        self,
        items: Sequence[EncoderRequest],
        windows: Windows,
        paths: Sequence[tuple[EncoderPath, list[int]]],
    ) -> list[dict[str, SignalScore]]:
        needed = frozenset().union(*(item.signals for item in items))
        results: list[dict[str, SignalScore]] = [{} for _ in items]
        for path, texts in paths:
            if not texts:
                continue
            part = windows if len(texts) == len(items) else windows.subset(texts)
            with torch.inference_mode():
                emb = forward_rows(part, path.pad_id, self.chunk_size, path.encoder.forward)
                # One small matmul per signal for the whole batch, then one device->CPU copy.
                scores = {name: path.signals[name].row_scores(emb).float().cpu() for name in needed}
            for k, rows in enumerate(rows_by_owner(part)):
                item = items[texts[k]]
                results[texts[k]] = self._aggregate(item, rows, part, k, scores, path)
        return results

    def _aggregate(
        self,
        item: EncoderRequest,
        rows: Sequence[int],
        windows: Windows,
        owner: int,
        scores: Mapping[str, torch.Tensor],
        path: EncoderPath,
    ) -> dict[str, SignalScore]:
        index = torch.tensor(rows, dtype=torch.long)
        weights = torch.tensor([len(windows.rows[r]) for r in rows], dtype=torch.float32)
        count, truncated = windows.counts[owner], windows.truncated[owner]
        result: dict[str, SignalScore] = {}
        for name in item.signals:
            result[name] = path.signals[name].aggregate(
                scores[name][index], count, truncated, weights, item.text
            )
            if truncated and self.on_truncated is not None:
                self.on_truncated(name)
        return result

    def warm_up(self) -> None:
        """One forward pass through every signal on every path (start-up; also checks
        head/encoder shapes)."""
        items = [EncoderRequest("warm-up", frozenset(self.signals))]
        windows = self._split(items)
        for path in (self.full, self.long.path if self.long else None):
            if path is not None:
                self._score(items, windows, [(path, [0])])
