"""A sliding-window budget of requests and tokens, shared by all threads that call one endpoint, that holds as the
server counts.

Providers count the requests and tokens that *arrive* in any rolling window. The client cannot see when a request
arrives, only that it arrives after admission and before its response. So a request occupies the budget from its
admission until one window after its response (or its failure) came back: for any server window holding the
arrivals of several requests, every one of them still occupied the budget when the last of them was admitted, so
no window ever holds more than the budget, however long the requests took to reach the server. The price is
that a request's latency is added to its window: the steady rate is ``budget / (window + latency)``, under 1 %
below the budget for the protocol's 60 s window and sub-second latencies.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager


class SlidingWindowLimiter:
    def __init__(self, max_requests: int, max_tokens: int, window_s: float) -> None:
        if max_requests < 1 or max_tokens < 1 or window_s <= 0:
            raise ValueError("A rate budget needs at least one request, one token and a positive window.")
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.window_s = window_s
        self._in_flight = 0
        self._in_flight_tokens = 0
        # (when the response came back, tokens), in that order: each leaves the budget one window later.
        self._finished: deque[tuple[float, int]] = deque()
        self._finished_tokens = 0
        self._condition = threading.Condition()

    @contextmanager
    def slot(self, tokens: int) -> Iterator[float]:
        """Hold the budget for one request of ``tokens`` while the block sends it and reads its response (or
        fails); yields the seconds waited for admission."""
        waited = self._admit(tokens)
        try:
            yield waited
        finally:
            self._finish(tokens)

    def _check(self, tokens: int) -> None:
        if tokens > self.max_tokens:
            raise ValueError(
                f"One request is estimated at {tokens} tokens, more than the whole budget of {self.max_tokens} "
                "per window; it can never be sent."
            )

    def _admit(self, tokens: int) -> float:
        self._check(tokens)
        started = time.monotonic()
        with self._condition:
            while True:
                now = time.monotonic()
                self._expire(now)
                requests = self._in_flight + len(self._finished)
                used = self._in_flight_tokens + self._finished_tokens
                if requests < self.max_requests and used + tokens <= self.max_tokens:
                    self._in_flight += 1
                    self._in_flight_tokens += tokens
                    return now - started
                room_at = self._next_room(requests, used, tokens)
                # Without finished requests to expire, only a request finishing can make room: wait for it.
                self._condition.wait(timeout=None if room_at is None else max(room_at - now, 0.001))

    def _finish(self, tokens: int) -> None:
        with self._condition:
            self._in_flight -= 1
            self._in_flight_tokens -= tokens
            self._finished.append((time.monotonic(), tokens))
            self._finished_tokens += tokens
            self._condition.notify_all()

    def _expire(self, now: float) -> None:
        while self._finished and now - self._finished[0][0] >= self.window_s:
            _, spent = self._finished.popleft()
            self._finished_tokens -= spent

    def _next_room(self, requests: int, used: int, tokens: int) -> float | None:
        """When enough finished requests will have left the window for ``tokens`` to fit both budgets; None when
        expiring all of them is not enough (requests still in flight hold the budget)."""
        for finished_at, spent in self._finished:
            requests -= 1
            used -= spent
            if requests < self.max_requests and used + tokens <= self.max_tokens:
                return finished_at + self.window_s
        return None
