"""The store's schema under Alembic: ``versions/`` holds the revisions, ``env.py`` the environment.

``ensure_schema`` is what ``Store()`` runs on every open, so it is cheap in the two common cases:
- a database already at head: one look at ``alembic_version``;
- a brand-new database: ``create_all`` from the models, stamped head without loading Alembic (many tests do this).
Any other database is upgraded with Alembic: one with medeval's tables but no ``alembic_version`` is the schema from
before Alembic (commit 6a1c789), stamped with the baseline first. Rows are kept; SQLite ALTERs run in batch mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table, inspect, select
from sqlalchemy.engine import Connection, Engine

MIGRATIONS_DIR = Path(__file__).resolve().parent
BASELINE = "0001_baseline"
HEAD = "0012_ranged_claims"
"""The newest revision; a test checks it against the revisions in ``versions/``. Update both together."""

BASELINE_TABLES = frozenset({"runs", "case_results", "turns", "judgements", "annotations"})

_version_table = Table(
    "alembic_version", MetaData(),
    Column("version_num", String(32), nullable=False),
    PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


def alembic_config(connection: Connection | None = None, url: str | None = None) -> Any:
    """An Alembic ``Config`` for this package's migrations, bound to a connection (or a URL for Alembic's CLI)."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def current_revision(connection: Connection) -> str | None:
    if not inspect(connection).has_table("alembic_version"):
        return None
    versions = list(connection.execute(select(_version_table.c.version_num)).scalars())
    return versions[0] if len(versions) == 1 else None


def ensure_schema(engine: Engine, metadata: MetaData) -> str:
    """Bring the database to head. Returns what was done: "current", "created" or "upgraded"."""
    with engine.connect() as connection:
        tables = set(inspect(connection).get_table_names())
        if "alembic_version" in tables and current_revision(connection) == HEAD:
            return "current"
    if not tables & BASELINE_TABLES and "alembic_version" not in tables:
        try:
            with engine.begin() as connection:
                metadata.create_all(connection)
                _version_table.create(connection, checkfirst=True)
                if current_revision(connection) is None:
                    connection.execute(_version_table.insert(), {"version_num": HEAD})
            return "created"
        except Exception:  # noqa: BLE001 - another process created it at the same moment: upgrade what is there
            pass
    return _alembic_upgrade(engine)


def _alembic_upgrade(engine: Engine) -> str:
    from alembic import command

    with engine.begin() as connection:
        revision = current_revision(connection)
        if revision == HEAD:
            return "current"
        config = alembic_config(connection)
        if revision is None:
            missing = BASELINE_TABLES - set(inspect(connection).get_table_names())
            if missing:
                raise RuntimeError(
                    f"The database has some of medeval's tables but not {', '.join(sorted(missing))} and no "
                    "alembic_version; it is not a medeval store Alembic can upgrade."
                )
            command.stamp(config, BASELINE)
        command.upgrade(config, "head")
    return "upgraded"


def upgrade(url: str) -> str:
    """Upgrade the database at ``url`` to the newest schema (creating it when empty); rows are kept.

    The same as opening a ``Store`` on it, without the CLI. Returns "current", "created" or "upgraded".
    """
    from medeval_core.store import SQLModel, make_engine

    engine = make_engine(url)
    try:
        return ensure_schema(engine, SQLModel.metadata)
    finally:
        engine.dispose()
