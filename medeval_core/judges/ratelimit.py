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
once; places freed by other processes are seen when the window says they leave, or by looking again.
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
        self._turn = threading.Lock()
        self._freed = threading.Condition()
        self._in_flight: set[int] = set()
        self._renewer: threading.Thread | None = None

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
                admission = self.store.ride_out_outage(judge_budget.admit, self.store.engine, self.endpoint,
                                                       self.holder, tokens, self.budget)
                if admission.slot_id is not None:
                    with self._freed:
                        self._in_flight.add(admission.slot_id)
                        self._start_renewing()
                    return admission.slot_id, time.monotonic() - started
                with self._freed:
                    self._freed.wait(self.poll_s if admission.room_in_s is None
                                     else max(admission.room_in_s, 0.001))

    def _finish(self, slot_id: int) -> None:
        with self._freed:
            self._in_flight.discard(slot_id)
        # Not stored: the place then stays held until its lease runs out, which frees it later, never sooner.
        with suppress(Exception):
            self.store.ride_out_outage(judge_budget.finish, self.store.engine, slot_id)
        with self._freed:
            self._freed.notify_all()

    def _start_renewing(self) -> None:
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(target=self._renew, name=f"judge-budget-{self.holder}", daemon=True)
            self._renewer.start()

    def _renew(self) -> None:
        """Keep the leases of this process's requests in flight; ends when none is left."""
        while True:
            time.sleep(self.budget.lease_s / 3)
            with self._freed:
                held = sorted(self._in_flight)
            if not held:
                with self._freed:
                    if not self._in_flight:
                        self._renewer = None
                        return
                continue
            try:
                judge_budget.renew(self.store.engine, held, self.budget.lease_s)
            except Exception:  # noqa: BLE001 - a missed renewal ends the lease sooner: the place is freed later
                continue


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
