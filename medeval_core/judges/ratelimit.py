"""A sliding-window budget of requests and tokens, shared by all threads that call one endpoint.

Providers count requests and tokens over a rolling window, so a fixed per-minute bucket can overshoot at bucket
edges; this limiter keeps the log of admissions in the last window and admits a request only when both budgets
hold for every window that contains it.
"""

from __future__ import annotations

import threading
import time
from collections import deque


def default_guard(window_s: float) -> float:
    """2 % of the window, at least 50 ms (thread scheduling on a busy machine) and at most 0.5 s."""
    return min(0.5, max(0.05, 0.02 * window_s))


class SlidingWindowLimiter:
    def __init__(
        self,
        max_requests: int,
        max_tokens: int,
        window_s: float,
        guard_s: float | None = None,
    ) -> None:
        if max_requests < 1 or max_tokens < 1 or window_s <= 0:
            raise ValueError("A rate budget needs at least one request, one token and a positive window.")
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.window_s = window_s
        # An admission is held a little longer than the window: a request reaches the server some milliseconds
        # after admission, and uneven delays must not let the server see two windows' worth inside one window.
        self.hold_s = window_s + (default_guard(window_s) if guard_s is None else guard_s)
        self._log: deque[tuple[float, int]] = deque()
        self._tokens = 0
        self._condition = threading.Condition()

    def acquire(self, tokens: int) -> float:
        """Block until a request of ``tokens`` fits both budgets, record it, and return the seconds waited."""
        if tokens > self.max_tokens:
            raise ValueError(
                f"One request is estimated at {tokens} tokens, more than the whole budget of {self.max_tokens} "
                "per window; it can never be sent."
            )
        started = time.monotonic()
        with self._condition:
            while True:
                now = time.monotonic()
                self._expire(now)
                if len(self._log) < self.max_requests and self._tokens + tokens <= self.max_tokens:
                    self._log.append((now, tokens))
                    self._tokens += tokens
                    return now - started
                self._condition.wait(timeout=max(self._next_room(tokens) - now, 0.001))

    def _expire(self, now: float) -> None:
        while self._log and now - self._log[0][0] >= self.hold_s:
            _, spent = self._log.popleft()
            self._tokens -= spent

    def _next_room(self, tokens: int) -> float:
        """When enough of the oldest admissions will have left the window for ``tokens`` to fit both budgets."""
        requests, used = len(self._log), self._tokens
        room_at = time.monotonic()
        for admitted_at, spent in self._log:
            if requests < self.max_requests and used + tokens <= self.max_tokens:
                break
            requests -= 1
            used -= spent
            room_at = admitted_at + self.hold_s
        return room_at
