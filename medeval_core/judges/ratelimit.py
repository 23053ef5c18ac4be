"""A sliding-window budget of requests and tokens per judge endpoint (base URL + model), shared by every thread
and every process using the same store (SQLite on one host, PostgreSQL across hosts), that holds as the server
counts.

Providers count the requests and tokens that *arrive* in any rolling window. The client cannot see when a request
arrives, only that it arrives after admission and before its response. So a request occupies the budget from its
admission until one window after its response (or its failure) came back: for any server window holding the
arrivals of several requests, every one of them still occupied the budget when the last of them was admitted, so
no window ever holds more than the budget, however long the requests took to reach the server and however many
runs, workers and hosts send them. The price is that a request's latency is added to its window: the steady rate
is ``budget / (window + latency)``, under 1 % below the budget for the protocol's 60 s window and sub-second
latencies.

The places are rows of the store (``medeval_core.store.judge_budget``), so two runs at once, or the workers of
one run on several hosts, share one budget. A request in flight holds a lease that its process renews; a process
that dies stops renewing, and its places come back one window after their leases ran out. Within a process, one
thread at a time asks the store for a place (the others queue here), and a place freed here wakes the queue at
once; places freed by other processes are seen when the window says they leave, or by looking again. An answer is
written to the store with the process's next admission (one transaction per request in the steady state), or by a
keeper thread within a tenth of a second when none follows.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from medeval_core.store import Store, judge_budget
from medeval_core.store.judge_budget import Budget

TIDY_EVERY = 64
"""Every this many admissions, one also deletes the rows that left the window."""

DEFAULT_LEASE_S = 30.0
"""How long a request in flight keeps its place without its process renewing it (a dead process's places come
back one window after this)."""


class SharedWindowLimiter:
    def __init__(self, store: Store, base_url: str, model: str, max_requests: int, max_tokens: int,
                 window_s: float, lease_s: float = DEFAULT_LEASE_S) -> None:
        if max_requests < 1 or max_tokens < 1 or window_s <= 0:
            raise ValueError("A rate budget needs at least one request, one token and a positive window.")
        self.store = store
        self.endpoint = judge_budget.endpoint_key(base_url, model)
        self.budget = Budget(max_requests=max_requests, max_tokens=max_tokens, window_s=window_s, lease_s=lease_s)
        self.holder = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        # Places held elsewhere free without telling this process: look again this often while none is due.
        self.poll_s = min(window_s / 20, 0.25)
        # Answers no admission wrote along are written this often, so other processes see the places freed.
        self.flush_s = min(self.poll_s, 0.1)
        self._turn = threading.Lock()
        self._freed = threading.Condition()
        self._in_flight: set[int] = set()
        self._unwritten: list[int] = []
        self._admissions = 0
        self._keeper: threading.Thread | None = None

    @property
    def max_requests(self) -> int:
        return self.budget.max_requests

    @property
    def max_tokens(self) -> int:
        return self.budget.max_tokens

    @property
    def window_s(self) -> float:
        return self.budget.window_s

    @contextmanager
    def slot(self, tokens: int) -> Iterator[float]:
        """Hold a place in the endpoint's budget for one request of ``tokens`` while the block sends it and reads
        its response (or fails); yields the seconds waited for admission."""
        slot_id, waited = self._admit(tokens)
        try:
            yield waited
        finally:
            self._finish(slot_id)

    def _admit(self, tokens: int) -> tuple[int, float]:
        if tokens > self.max_tokens:
            raise ValueError(
                f"One request is estimated at {tokens} tokens, more than the whole budget of {self.max_tokens} "
                "per window; it can never be sent."
            )
        started = time.monotonic()
        with self._turn:
            while True:
                with self._freed:
                    finished, self._unwritten = self._unwritten, []
                self._admissions += 1
                admission = self.store.ride_out_outage(
                    judge_budget.admit, self.store.engine, self.endpoint, self.holder, tokens, self.budget,
                    finished=finished, tidy=self._admissions % TIDY_EVERY == 0)
                if admission.slot_id is not None:
                    with self._freed:
                        self._in_flight.add(admission.slot_id)
                        self._start_keeping()
                    return admission.slot_id, time.monotonic() - started
                with self._freed:
                    self._freed.wait(self.poll_s if admission.room_in_s is None
                                     else max(admission.room_in_s, 0.001))

    def _finish(self, slot_id: int) -> None:
        """The answer came back. Written with this process's next admission, or by the keeper within
        ``flush_s``: until then the place stays held, which frees it later, never sooner."""
        with self._freed:
            self._in_flight.discard(slot_id)
            self._unwritten.append(slot_id)
            self._start_keeping()
            self._freed.notify_all()

    def _start_keeping(self) -> None:
        if self._keeper is None or not self._keeper.is_alive():
            self._keeper = threading.Thread(target=self._keep, name=f"judge-budget-{self.holder}", daemon=True)
            self._keeper.start()

    def _keep(self) -> None:
        """Write finished requests that no admission took along, and renew the leases of this process's
        requests in flight; ends when there is nothing left to write or renew."""
        renewed = time.monotonic()
        while True:
            time.sleep(self.flush_s)
            with self._freed:
                finished, self._unwritten = self._unwritten, []
                held = sorted(self._in_flight)
                if not finished and not held:
                    self._keeper = None
                    return
            # A write that fails leaves those places held until their leases run out: freed later, never sooner.
            with suppress(Exception):
                judge_budget.finish(self.store.engine, finished)
            if held and time.monotonic() - renewed >= self.budget.lease_s / 3:
                with suppress(Exception):
                    judge_budget.renew(self.store.engine, held, self.budget.lease_s)
                renewed = time.monotonic()


_limiters: dict[tuple[str, str, int, int, float], SharedWindowLimiter] = {}
_limiters_lock = threading.Lock()


def shared_limiter(store: Store, base_url: str, model: str, max_requests: int, max_tokens: int,
                   window_s: float) -> SharedWindowLimiter:
    """One limiter per store, endpoint and budget in this process, so that its judges queue in one place."""
    key = (store.url, judge_budget.endpoint_key(base_url, model), max_requests, max_tokens, window_s)
    with _limiters_lock:
        if key not in _limiters:
            _limiters[key] = SharedWindowLimiter(store, base_url, model, max_requests, max_tokens, window_s)
        return _limiters[key]
