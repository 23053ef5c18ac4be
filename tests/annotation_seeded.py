"""The seeded runs and accounts as fixtures (loaded with ``pytest_plugins = ("tests.annotation_seeded",)``): made
once per session, copied into each test's own store."""

from __future__ import annotations

from pathlib import Path

import pytest

from medeval_core import context
from tests.annotation_fixtures import SeededRuns, add_accounts, seed_runs


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SeededRuns]:
    """The runs and accounts, made once per session into a database file that each test gets a copy of."""
    root = tmp_path_factory.mktemp("annotation-seed")
    url = f"sqlite:///{root / 'seed.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MEDEVAL_DB_URL", url)
        context.reset()
        add_accounts(patch)
        runs = seed_runs(root)
        context.current_store().engine.dispose()
    context.reset()
    return root / "seed.db", runs


@pytest.fixture
def seeded(seeded_template: tuple[Path, SeededRuns], isolated_store: str) -> SeededRuns:
    """This test's own store (``isolated_store``) filled with a copy of the seeded runs and accounts."""
    import sqlite3

    template, runs = seeded_template
    target = isolated_store.removeprefix("sqlite:///")
    with sqlite3.connect(template) as source, sqlite3.connect(target) as copy:
        source.backup(copy)
    return runs
