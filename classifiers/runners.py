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


class SharedEncoderRunner:
    """Batch function of the shared encoder queue: texts -> scores of the requested signals."""

    def __init__(
        self,
        encoder: Encoder,
        signals: Mapping[str, SharedSignal],
        max_windows: int,
        chunk_size: int,
        on_truncated: TruncatedCallback | None = None,
    ) -> None:
        self.encoder = encoder
        self.signals = dict(signals)
        self.max_windows = max_windows
        self.chunk_size = chunk_size
        self.on_truncated = on_truncated
        self.pad_id = pad_id_of(encoder.tokenizer)

    def __call__(
        self, items: list[EncoderRequest], report: StageReporter
    ) -> list[dict[str, SignalScore]]:
        started = time.perf_counter()
        windows = split_windows(
            self.encoder.tokenizer,
            [item.text for item in items],
            self.encoder.max_length,
            self.max_windows,
        )
        tokenized = time.perf_counter()
        report("tokenize", tokenized - started)
        needed = frozenset().union(*(item.signals for item in items))
        with torch.inference_mode():
            emb = forward_rows(windows, self.pad_id, self.chunk_size, self.encoder.forward)
            # One small matmul per signal for the whole batch, then a single device->CPU copy.
            scores = {name: self.signals[name].row_scores(emb).float().cpu() for name in needed}
        report("inference", time.perf_counter() - tokenized)
        return [
            self._aggregate(item, rows, windows, i, scores)
            for i, (item, rows) in enumerate(zip(items, rows_by_owner(windows), strict=True))
        ]

    def _aggregate(
        self,
        item: EncoderRequest,
        rows: Sequence[int],
        windows: Windows,
        owner: int,
        scores: Mapping[str, torch.Tensor],
    ) -> dict[str, SignalScore]:
        index = torch.tensor(rows, dtype=torch.long)
        weights = torch.tensor([len(windows.rows[r]) for r in rows], dtype=torch.float32)
        count, truncated = windows.counts[owner], windows.truncated[owner]
        result: dict[str, SignalScore] = {}
        for name in item.signals:
            result[name] = self.signals[name].aggregate(
                scores[name][index], count, truncated, weights, item.text
            )
            if truncated and self.on_truncated is not None:
                self.on_truncated(name)
        return result

    def warm_up(self) -> None:
        """One forward pass through every signal (start-up; also checks head/encoder shapes)."""
        self([EncoderRequest("warm-up", frozenset(self.signals))], lambda stage, seconds: None)
