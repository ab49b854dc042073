"""Bounded, cancellable scans of long texts on worker threads.

A pattern detector's cost grows with its text, and a request body may hold 8 MiB of it
(the recognizers take about a second per MB of digit groups). A long text is scanned in chunks:
``windows`` cuts it at whitespace where it can and gives each chunk an overlap on both sides,
so a value spanning a cut, and the context words around it, are seen whole; a finding belongs
to the chunk its start lies in, so the overlaps never report one twice. ``ScanBudget`` is
checked before each chunk: it ends the scan at its deadline (``ClassifierTimeout``) or as
soon as the request waiting for it went away (``ScanCancelled``), so no thread keeps burning
a core for a request Envoy already gave up on.

Constraints: pure Python, no torch, nothing from ``extproc/``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from itertools import pairwise

from classifiers.api import ClassifierError, ClassifierTimeout

CHUNK_CHARS = 32 * 1024
"""About 30 ms of the recognizers on digit-heavy text: how late a deadline or cancellation
is seen."""
OVERLAP_CHARS = 256
"""Context scanned on each side of a chunk: longer than any value shape the detectors look
for plus the context windows they read (40 characters before a value, 30 after)."""
_SNAP_CHARS = 4096  # how far a window edge moves outwards to reach whitespace
_SPACES = " \n\t\r"


class ScanCancelled(ClassifierError):
    """The request waiting for this scan is gone (its stream was cancelled)."""


class CpuAccount:
    """The CPU time the scans of one request may spend together, on their own threads."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent = 0.0
        self._lock = threading.Lock()

    def charge(self, seconds: float) -> float:
        """Adds ``seconds``; the total spent."""
        with self._lock:
            self.spent += seconds
            return self.spent


class ScanBudget:
    """What one scan may still spend and whether anyone still waits for it. The scan calls
    ``check`` before each chunk, on its worker thread; the awaiting side calls ``cancel``.
    ``chunks`` counts the chunks started.

    The budget is CPU time: the scanning thread's own, charged to ``account`` (shared by the
    scans of one request, else the scan's alone), not the wall clock. A text is too long to
    scan whatever else runs, so a busy host (other requests' scans, the encoder, Envoy on the
    same cores) does not turn a long harmless prompt into a failed scan; how long the caller
    waits in wall time is its own bound (``extproc.signals.evaluator._detect``)."""

    def __init__(self, seconds: float, account: CpuAccount | None = None) -> None:
        self.account = account if account is not None else CpuAccount(seconds)
        self.chunks = 0
        self._last: float | None = None  # the scanning thread's CPU clock at its last check
        self._cancelled = False  # one attribute store: visible to the scanning thread

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def check(self) -> None:
        """Raises ``ScanCancelled`` or ``ClassifierTimeout`` when the scan must stop."""
        if self._cancelled:
            raise ScanCancelled(f"scan cancelled after {self.chunks} chunks")
        now = time.thread_time()
        spent = self.account.charge(0.0 if self._last is None else now - self._last)
        self._last = now
        if spent >= self.account.seconds:
            raise ClassifierTimeout(f"scan stopped after {self.chunks} chunks at its "
                                    f"{self.account.seconds * 1000:.0f} ms CPU budget")
        self.chunks += 1


@dataclass(frozen=True, slots=True)
class Window:
    """Scan ``text[start:end]``; keep what starts in ``[own_start, own_end)``."""

    start: int
    end: int
    own_start: int
    own_end: int


def windows(
    text: str, size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS
) -> tuple[Window, ...]:
    """The windows covering ``text``: one for a text of at most ``size`` characters, else
    chunks of at most ``size`` cut after whitespace (a hard cut only where half a chunk
    has none), each widened by ``overlap`` and then out to the nearest whitespace."""
    n = len(text)
    if n <= size:
        return (Window(0, n, 0, n),)
    cuts = [0]
    while n - cuts[-1] > size:
        start = cuts[-1]
        space = max(text.rfind(c, start + size // 2, start + size) for c in _SPACES)
        cuts.append(space + 1 if space >= 0 else start + size)
    cuts.append(n)
    return tuple(
        Window(_left_edge(text, own_start - overlap), _right_edge(text, own_end + overlap),
               own_start, own_end)
        for own_start, own_end in pairwise(cuts)
    )


def _left_edge(text: str, position: int) -> int:
    """``position`` moved left onto whitespace, so look-behinds at the chunk see real text."""
    if position <= 0:
        return 0
    space = max(text.rfind(c, max(0, position - _SNAP_CHARS), position) for c in _SPACES)
    return space if space >= 0 else position


def _right_edge(text: str, position: int) -> int:
    """``position`` moved right past whitespace, so no value is cut short at the edge."""
    if position >= len(text):
        return len(text)
    found = [i for c in _SPACES if (i := text.find(c, position, position + _SNAP_CHARS)) >= 0]
    return min(found) + 1 if found else position
