"""Error classes the command line catches, in a module that imports nothing heavy.

``python -m medeval_core --help`` builds its parser without importing the store (SQLAlchemy, SQLModel) or the
data downloader (httpx), and a command imports only what it uses (``score hitk`` no pydantic); the CLI still has to
name the store's, the settings' and the benchmarks' errors in its ``except`` clause, so they live here and
``medeval_core.store``, ``medeval_core.settings`` and ``medeval_core.benchmark`` re-export them
(``from medeval_core.store import StoreError`` keeps working).
"""


class StoreError(RuntimeError):
    """A store operation that cannot be done; the message says what to do."""


class DuplicateResultError(StoreError):
    """A finished result for this (run, case, repetition) is already stored."""


class DatabaseUnavailable(StoreError):
    """The database stayed out of reach for longer than the outage limit (``store.outage``)."""


class StoreFullError(StoreError):
    """The database has no space left for a write."""


def one_line(text: str) -> str:
    """``text`` on one line: a driver's message often spans several (psycopg adds hints on lines of their own)."""
    return " ".join(text.split())


class SettingsError(ValueError):
    """A configuration file or environment variable is missing or invalid."""


class BenchmarkError(ValueError):
    """A run cannot be built from its parameters (cases missing, inputs changed); the message says what to fix."""
