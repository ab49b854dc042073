"""Split texts into bounded, overlapping token windows and pad them into length-sorted chunks.

Constraints: a text longer than the model window becomes at most `max_windows` windows of
`max_length` tokens (special tokens included) overlapping by `overlap` tokens; windows beyond the
bound are dropped and reported (`truncated`), never silently. Before tokenizing, a text is cut at a
character budget far above what `max_windows` windows can hold, so a 1 MiB prompt cannot stall the
worker thread in the tokenizer; such a cut also marks the text truncated. Needs a fast
(Rust-backed) tokenizer, which provides `return_overflowing_tokens`. A fast tokenizer sets its
truncation state on each call, so calls on one tokenizer from several queue workers take turns.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

# English averages ~4 characters per token; 32 leaves room for URLs, code and unusual scripts
# while still bounding tokenizer work on hostile input.
CHARS_PER_TOKEN_BUDGET = 32

_TOKENIZER_LOCKS: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, threading.Lock] = (
    weakref.WeakKeyDictionary()
)


def load_tokenizer(path: str) -> PreTrainedTokenizerBase:
    """The tokenizer at `path`, reading special-token strings in the text as plain text: a
    prompt holding "[CLS]" or "[PAD]" reaches the served model as punctuation, so the
    classifiers must not see it as the encoder's control tokens (ten "[CLS]" in front of a
    jailbreak would otherwise hide it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, split_special_tokens=True)


def _tokenizer_lock(tokenizer: PreTrainedTokenizerBase) -> threading.Lock:
    """The tokenizer's lock: a lookup, made once per tokenizer (setdefault keeps one winner)."""
    lock = _TOKENIZER_LOCKS.get(tokenizer)
    if lock is None:
        lock = _TOKENIZER_LOCKS.setdefault(tokenizer, threading.Lock())
    return lock


@dataclass(frozen=True)
class Windows:
    """Token windows of a batch of texts.

    `rows[i]` are the token ids of window i (special tokens included, unpadded) and `owners[i]` the
    index of the text it came from; `counts[t]` / `truncated[t]` / `tokens[t]` are per text
    (`tokens`: the text's length in tokens, counted before the window bound dropped any).
    """

    rows: tuple[tuple[int, ...], ...]
    owners: tuple[int, ...]
    counts: tuple[int, ...]
    truncated: tuple[bool, ...]
    tokens: tuple[int, ...] = ()

    @property
    def dropped(self) -> int:
        """Number of texts that lost content to the window bound."""
        return sum(self.truncated)

    def subset(self, texts: Sequence[int]) -> Windows:
        """The windows of `texts` only, renumbered: text `texts[k]` becomes text k."""
        new_owner = {old: new for new, old in enumerate(texts)}
        kept = [i for i, owner in enumerate(self.owners) if owner in new_owner]
        return Windows(
            tuple(self.rows[i] for i in kept),
            tuple(new_owner[self.owners[i]] for i in kept),
            tuple(self.counts[t] for t in texts),
            tuple(self.truncated[t] for t in texts),
            tuple(self.tokens[t] for t in texts) if self.tokens else (),
        )


def default_overlap(max_length: int) -> int:
    """Overlap between consecutive windows: 1/8 of the window, so a phrase cut at a border is
    still seen whole by one window in most cases."""
    return max(0, max_length // 8)


def split_windows(
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    max_length: int,
    max_windows: int,
    overlap: int | None = None,
) -> Windows:
    """Tokenize `texts` into at most `max_windows` windows each (see module docstring)."""
    if max_windows < 1:
        raise ValueError("max_windows must be >= 1")
    stride = default_overlap(max_length) if overlap is None else overlap
    char_budget = max_windows * max_length * CHARS_PER_TOKEN_BUDGET
    clipped = [text[:char_budget] for text in texts]
    with _tokenizer_lock(tokenizer):
        encoded = tokenizer(
            clipped,
            truncation=True,
            max_length=max_length,
            stride=stride,
            return_overflowing_tokens=True,
        )
    mapping: list[int] = list(encoded["overflow_to_sample_mapping"])
    ids: list[list[int]] = encoded["input_ids"]
    seen = [0] * len(texts)
    specials = tokenizer.num_special_tokens_to_add()
    tokens = [specials + stride] * len(texts)  # each window after the first repeats `stride`
    rows: list[tuple[int, ...]] = []
    owners: list[int] = []
    for row, owner in zip(ids, mapping, strict=True):
        seen[owner] += 1
        tokens[owner] += len(row) - specials - stride
        if seen[owner] <= max_windows:
            rows.append(tuple(row))
            owners.append(owner)
    truncated = tuple(
        seen[i] > max_windows or len(texts[i]) > char_budget for i in range(len(texts))
    )
    counts = tuple(min(n, max_windows) for n in seen)
    return Windows(tuple(rows), tuple(owners), counts, truncated, tuple(tokens))


def pad_rows(rows: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad token rows into `input_ids` / `attention_mask` / `token_type_ids` tensors."""
    width = max((len(r) for r in rows), default=0)
    # one tensor built from padded lists: a copy per row costs more than the rows' ints
    padded = [[*row, *([pad_id] * (width - len(row)))] for row in rows]
    input_ids = torch.tensor(padded, dtype=torch.long).reshape(len(rows), width)
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    attention = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).long()
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "token_type_ids": torch.zeros_like(input_ids),
    }


# A chunk ends before a row this much longer than the chunk's shortest one (plus a few
# tokens): a prompt's short last window then runs on its own instead of being padded to the
# full window length (a 512-token prompt: 2 x 256 + 45 tokens instead of 3 x 256).
MAX_LENGTH_SPREAD = 1.5


def length_sorted_chunks(windows: Windows, chunk_size: int) -> Iterator[list[int]]:
    """Row indices in chunks of at most `chunk_size`, grouped by length so padding stays
    small (see `MAX_LENGTH_SPREAD`)."""
    order = sorted(range(len(windows.rows)), key=lambda i: len(windows.rows[i]))
    size = max(1, chunk_size)
    chunk: list[int] = []
    shortest = 0
    for index in order:
        length = len(windows.rows[index])
        if chunk and (len(chunk) >= size or length > shortest * MAX_LENGTH_SPREAD + 16):
            yield chunk
            chunk = []
        if not chunk:
            shortest = length
        chunk.append(index)
    if chunk:
        yield chunk
