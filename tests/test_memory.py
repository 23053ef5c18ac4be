"""The runner's garbage-collector settings: set while runs go by, restored after the last one."""

from __future__ import annotations

import gc
import threading

from medeval_core.memory import rare_young_collections


def test_young_collections_are_rarer_during_runs_and_restored_after_the_last() -> None:
    before = gc.get_threshold()
    first_inside, second_left = threading.Event(), threading.Event()
    seen: list[tuple[int, int, int]] = []

    def second_runner() -> None:
        first_inside.wait(timeout=10)
        with rare_young_collections(5_000):
            seen.append(gc.get_threshold())
        second_left.set()

    thread = threading.Thread(target=second_runner)
    thread.start()
    with rare_young_collections(5_000):
        first_inside.set()
        second_left.wait(timeout=10)
        seen.append(gc.get_threshold())  # the other runner left: still set for this one
    thread.join()
    assert seen == [(max(5_000, before[0]), *before[1:])] * 2
    assert gc.get_threshold() == before
