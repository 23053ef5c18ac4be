"""Building many small objects fast: the store's bulk reads, the summaries and large case loaders share this."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many small objects that hold no cycles (it would scan
    them again and again as they are made: a third of the time at 100,000 results)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def long_lived(freeze: bool = False) -> Iterator[None]:
    """Pause the collector while a run's inputs are built (the KB, the patients, the cases: many objects that live
    as long as the run). With ``freeze``, everything alive at the end is moved out of the collector's reach
    (``gc.freeze``), so the run's collections never scan those objects again (a third of a second at 134,529
    cases, once at the first collection and again at every later full one). Only for a process that does
    one job and exits (the command line): a garbage cycle alive at that moment is never freed."""
    with gc_paused():
        try:
            yield
        finally:
            if freeze:
                gc.freeze()


_young_lock = threading.Lock()
_young_users = 0
_young_restore: tuple[int, int, int] | None = None


@contextmanager
def rare_young_collections(allocations: int = 10_000) -> Iterator[None]:
    """Collect the youngest generation every ``allocations`` container allocations instead of Python's 700 while
    a batch run's cases go by. Each case makes a few dozen short-lived records (result, turns, contexts) that
    reference counting frees; at 700 the collector ran every ~25 instant cases and, with the cases waiting for
    their group commit promoted to the old generation, set off full collections too: about 7 % of a runner's
    time on 20,000 instant cases. Cycles are still collected, in larger batches. Shared by the runners of one
    process: the first to enter sets the threshold, the last to leave restores it."""
    global _young_users, _young_restore
    with _young_lock:
        if _young_users == 0:
            _young_restore = gc.get_threshold()
            gc.set_threshold(max(allocations, _young_restore[0]), *_young_restore[1:])
        _young_users += 1
    try:
        yield
    finally:
        with _young_lock:
            _young_users -= 1
            if _young_users == 0 and _young_restore is not None:
                gc.set_threshold(*_young_restore)
