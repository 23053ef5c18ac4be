"""The judge's rate budget as the server counts it: arrivals in any window, whatever the delay before arrival;
kept in the store, so that every limiter of one endpoint shares it (threads here; processes in
tests/test_judge_budget_processes.py)."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from medeval_core.judges.ratelimit import SharedWindowLimiter
from medeval_core.store import open_store


def limiter(max_requests: int, max_tokens: int, window_s: float, model: str = "m") -> SharedWindowLimiter:
    """A limiter of its own on the test's store (``MEDEVAL_DB_URL``), as another process would have."""
    return SharedWindowLimiter(open_store(os.environ["MEDEVAL_DB_URL"]), "http://judge.invalid/v1", model,
                               max_requests, max_tokens, window_s)


def most_in_any_window(times: list[float], window_s: float) -> int:
    times = sorted(times)
    return max(sum(1 for u in times if t <= u < t + window_s) for t in times)


def test_budget_holds_at_the_server_when_requests_arrive_late() -> None:
    """Requests reach the server up to 0.15 s after admission (a loaded CPU, a slow connection) and answer
    0.05 s later: no window of arrivals holds more than the budget."""
    budget = limiter(max_requests=5, max_tokens=10_000, window_s=0.4)
    arrivals: list[float] = []
    lock = threading.Lock()
    delays = random.Random(7)

    def worker(delay_s: list[float]) -> None:
        for delay in delay_s:
            with budget.slot(10):
                time.sleep(delay)
                with lock:
                    arrivals.append(time.monotonic())
                time.sleep(0.05)

    # The first request of each worker arrives late, the next ones at once: the pattern that let a window of
    # admissions turn into a denser window of arrivals.
    plans = [[0.15] + [delays.uniform(0.0, 0.02) for _ in range(3)] for _ in range(5)]
    threads = [threading.Thread(target=worker, args=(plan,)) for plan in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(arrivals) == 20
    assert most_in_any_window(arrivals, 0.4) <= 5


def test_budget_is_used_in_full_once_the_window_after_the_responses_has_passed() -> None:
    budget = limiter(max_requests=4, max_tokens=10_000, window_s=0.3)
    admitted: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(3):
            with budget.slot(10), lock:
                admitted.append(time.monotonic())

    threads = [threading.Thread(target=worker) for _ in range(4)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 12
    assert most_in_any_window(admitted, 0.3) == 4
    elapsed = time.monotonic() - started
    assert 0.6 <= elapsed < 1.2  # 12 requests at 4 per window need three windows, and not many more


def test_a_request_in_flight_holds_its_place_until_it_finishes() -> None:
    # A window of 1 s: every admission is a store transaction, which on a busy CI core can take tens of ms, so
    # "not made to wait" is read as well under half a window rather than a few milliseconds.
    budget = limiter(max_requests=1, max_tokens=100, window_s=1.0)
    released = threading.Event()
    waited: list[float] = []

    def second() -> None:
        with budget.slot(10) as seconds:
            waited.append(seconds)

    with budget.slot(10) as first_wait:
        assert first_wait < 0.5
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(1.5)  # one and a half windows, but the first request has not been answered
        assert not waited
        released.set()
    thread.join()
    assert waited and waited[0] >= 1.5 + 1.0 - 0.1


def test_tokens_are_reserved_and_an_impossible_request_is_refused() -> None:
    budget = limiter(max_requests=100, max_tokens=100, window_s=1.0)
    with budget.slot(60) as waited:
        assert waited < 0.5
    with budget.slot(60) as waited:
        assert waited >= 0.95
    with pytest.raises(ValueError, match="never be sent"), budget.slot(101):
        pass


def test_limiters_of_one_endpoint_share_its_budget_and_other_endpoints_do_not(db_url: str) -> None:
    """Two limiters (as two processes would hold) on one endpoint admit the budget once per window between
    them; a limiter of another model on the same server has a budget of its own."""
    first, second = limiter(3, 10_000, 0.5), limiter(3, 10_000, 0.5)
    other = limiter(3, 10_000, 0.5, model="another-model")
    admitted: list[float] = []
    lock = threading.Lock()

    def worker(budget: SharedWindowLimiter) -> None:
        for _ in range(3):
            with budget.slot(10), lock:
                admitted.append(time.monotonic())

    threads = [threading.Thread(target=worker, args=(budget,)) for budget in (first, second)]
    for thread in threads:
        thread.start()
    with other.slot(10) as waited:
        assert waited < 0.2  # not held up by the busy endpoint
    for thread in threads:
        thread.join()
    assert len(admitted) == 6 and most_in_any_window(admitted, 0.5) == 3


def test_a_lost_process_frees_its_places_one_window_after_its_lease(db_url: str) -> None:
    """A place whose holder died (no finish, no renewal) comes back when its lease has run out plus a window."""
    store = open_store(db_url)
    lost = SharedWindowLimiter(store, "http://judge.invalid/v1", "m", 1, 100, 0.4, lease_s=0.6)
    survivor = SharedWindowLimiter(store, "http://judge.invalid/v1", "m", 1, 100, 0.4, lease_s=0.6)
    lost_at = time.monotonic()
    slot_id, _ = lost._admit(10)  # admitted, then the process "dies": never finished, never renewed
    with lost._freed:
        lost._in_flight.discard(slot_id)
    with survivor.slot(10):
        # Timed from the loss, not from the survivor's request: on a loaded machine the time between the two is the
        # scheduler's (a CI run once spent more than the lease and a window there, and the survivor rightly waited
        # no more).
        assert 0.6 + 0.4 - 0.05 <= time.monotonic() - lost_at < 4.0
