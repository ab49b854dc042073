"""Event-loop stalls: how long the router's loop made no progress, measured on the monotonic
clock (which keeps counting while the process is stopped, e.g. SIGSTOP, or while a callback
blocks the loop).

Contracts:

* :class:`StallMonitor` ticks every ``tick_s`` on the loop; a tick that comes more than
  ``min_stall_s`` late records a stall (when it ended, how long it lasted); the last
  ``keep`` stalls are kept (bounded).
* :meth:`StallMonitor.stalled_s` answers the longest stall that ended at or after ``since``,
  including one still under way (the loop just resumed and the monitor has not ticked yet:
  whoever asks runs on the same loop, so the time since the last tick is a stall too).
* It never blocks and costs one timer callback per tick (no task).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque


class StallMonitor:
    def __init__(self, tick_s: float = 0.05, min_stall_s: float = 0.05, keep: int = 16) -> None:
        self._tick_s = tick_s
        self._min_stall_s = min_stall_s
        self._stalls: deque[tuple[float, float]] = deque(maxlen=keep)  # (ended, seconds)
        self._last_tick = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Tick on the running loop until :meth:`stop` (a timer, not a task)."""
        if self._timer is None:
            self._last_tick = time.monotonic()
            self._timer = asyncio.get_running_loop().call_later(self._tick_s, self._on_timer)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self.tick()
        if self._timer is not None:
            self._timer = asyncio.get_running_loop().call_later(self._tick_s, self._on_timer)

    def tick(self, now: float | None = None) -> None:
        """Record the time since the last tick, beyond one tick, as a stall."""
        now = time.monotonic() if now is None else now
        late = now - self._last_tick - self._tick_s
        if late >= self._min_stall_s:
            self._stalls.append((now, late))
        self._last_tick = now

    def stalled_s(self, since: float, now: float | None = None) -> float:
        """The longest stall that ended at or after ``since`` (monotonic), or is under way."""
        now = time.monotonic() if now is None else now
        if self._timer is None:
            return 0.0  # not running: no evidence either way
        ongoing = max(0.0, now - self._last_tick - self._tick_s)
        return max([ongoing, *(s for ended, s in self._stalls if ended >= since)])
