"""Building many small objects fast: the store's bulk reads, the summaries and large case loaders share this."""

from __future__ import annotations

import gc
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
