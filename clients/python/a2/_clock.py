"""The worker's two clocks, in milliseconds: monotonic for its own timers
(backoff, pings, sweeps, session timers, lease renewals), real (Unix epoch)
for the times it passes to the store."""
from __future__ import annotations

import time


def mono_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def real_ms() -> int:
    return time.time_ns() // 1_000_000
