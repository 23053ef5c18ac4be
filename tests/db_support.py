"""Store tests on SQLite and on PostgreSQL: the ``db_url`` fixture gives each test a fresh database of each kind.

PostgreSQL comes from ``MEDEVAL_TEST_POSTGRES_URL``, a URL of a throw-away server whose user may create databases
(``.ci/run`` starts one and exports it; see the README for a local one). Each test gets a database of its own,
dropped afterwards. Without the variable the PostgreSQL cases are skipped, unless ``MEDEVAL_REQUIRE_POSTGRES=1``
(set by ``.ci/run``) makes them fail: CI never passes by skipping them.

Import the fixture into a test module (``from tests.db_support import db_url``) to parametrise its tests over both.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from medeval_core import context

POSTGRES_URL_VARIABLE = "MEDEVAL_TEST_POSTGRES_URL"


def postgres_server_url() -> str:
    url = os.environ.get(POSTGRES_URL_VARIABLE)
    if url:
        return url
    message = (f"{POSTGRES_URL_VARIABLE} is not set: start a throw-away PostgreSQL server (as .ci/run does) and "
               "export its URL, e.g. postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
    if os.environ.get("MEDEVAL_REQUIRE_POSTGRES") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test."""
    server = make_url(postgres_server_url())
    name = f"medeval_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        from medeval_core.store import _stores

        for url, store in list(_stores.items()):
            if name in url:
                store.engine.dispose()
                del _stores[url]
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, isolated_store: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test's database URL, once SQLite (the isolated file) and once PostgreSQL; ``MEDEVAL_DB_URL`` names it,
    so subprocesses and ``context.current_store()`` use it too."""
    if request.param == "sqlite":
        return isolated_store
    url: str = request.getfixturevalue("postgres_url")
    monkeypatch.setenv("MEDEVAL_DB_URL", url)
    context.reset()
    return url
