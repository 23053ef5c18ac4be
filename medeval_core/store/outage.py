"""Riding out a database outage: a store operation that fails because the database went away (a PostgreSQL
restart, a dropped connection, a SQLite file locked past its busy timeout) is retried with exponential backoff
(tenacity) until the database answers again or the outage has lasted ``MEDEVAL_DB_OUTAGE_SECONDS`` (default 120);
then one ``DatabaseUnavailable`` names the database (credentials masked) and the last error.

Each retry is a new transaction on a fresh connection (``pool_pre_ping`` drops the dead ones), so an operation
whose commit failed is redone whole; the store's writes are idempotent (a finished result is never written twice),
so a commit that did land before its connection dropped is not doubled by the retry. A full disk is no outage: it
is reported at once (``StoreFullError``), since waiting does not free space."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay, wait_exponential, wait_random

from medeval_core.errors import DatabaseUnavailable, StoreError, StoreFullError, one_line
from medeval_core.redaction import mask_credentials, redact

T = TypeVar("T")

OUTAGE_VARIABLE = "MEDEVAL_DB_OUTAGE_SECONDS"
DEFAULT_OUTAGE_S = 120.0


def outage_limit_s() -> float:
    """How long an operation waits for the database to come back (``MEDEVAL_DB_OUTAGE_SECONDS``)."""
    raw = os.environ.get(OUTAGE_VARIABLE)
    if not raw:
        return DEFAULT_OUTAGE_S
    try:
        value = float(raw)
    except ValueError:
        raise StoreError(f"{OUTAGE_VARIABLE}={raw!r} is not a number of seconds; set it to e.g. 120.") from None
    if value < 0:
        raise StoreError(f"{OUTAGE_VARIABLE} must be 0 or more seconds, not {raw}.")
    return value


def _driver_message(exc: DBAPIError) -> str:
    return str(exc.orig) if exc.orig is not None else str(exc)


def database_error(exc: BaseException | None) -> DBAPIError | None:
    """The driver's error behind ``exc``: itself, or the one a store method wrapped in a ``StoreError`` after
    its own retries (``save_case_records`` does)."""
    if isinstance(exc, DBAPIError):
        return exc
    if isinstance(exc, StoreError) and isinstance(exc.__cause__, DBAPIError):
        return exc.__cause__
    return None


def is_disk_full(raised: BaseException) -> bool:
    exc = database_error(raised)
    if exc is None:
        return False
    # SQLite: SQLITE_FULL; PostgreSQL: SQLSTATE 53100 (disk_full), or the OS's ENOSPC in its message.
    message = _driver_message(exc).lower()
    return (getattr(exc.orig, "sqlstate", None) == "53100" or "database or disk is full" in message
            or "no space left on device" in message)


def is_outage(raised: BaseException) -> bool:
    """Whether ``raised`` says the database is (for now) out of reach rather than that the operation is wrong."""
    exc = database_error(raised)
    if exc is None or is_disk_full(exc):
        return False
    return exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError))


def ride_out(url: str, call: Callable[..., T], *args: Any, on_return: Callable[[], None] | None = None,
             limit_s: float | None = None, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``, retried while the database is out of reach, for at most ``limit_s`` seconds
    (default ``outage_limit_s()``). ``on_return`` runs before each retry (a worker renews its leases there, so
    they are its own again as soon as the database is back); its own failures are ignored."""
    limit = outage_limit_s() if limit_s is None else limit_s
    started = time.monotonic()

    def before(state: RetryCallState) -> None:
        if on_return is not None and state.attempt_number > 1:
            with suppress(Exception):  # still out of reach: the retry itself will tell
                on_return()

    retrying = Retrying(stop=stop_after_delay(limit),
                        wait=wait_exponential(multiplier=0.1, max=5) + wait_random(0, 0.1),
                        retry=retry_if_exception(is_outage), before=before, reraise=True)
    try:
        return retrying(call, *args, **kwargs)
    except (DBAPIError, StoreError) as raised:
        exc = database_error(raised)
        if exc is None or isinstance(raised, (DatabaseUnavailable, StoreFullError)):
            raise
        where = mask_credentials(url)
        message = one_line(redact(_driver_message(exc)))
        if is_disk_full(exc):
            raise StoreFullError(f"The database {where} is out of disk space ({message}); every case committed so far "
                                 "is kept: free space or move the store, then resume the run.") from None
        if is_outage(exc):
            raise DatabaseUnavailable(
                f"The database {where} was unreachable for {time.monotonic() - started:.0f} s (the limit is "
                f"{limit:g} s, {OUTAGE_VARIABLE}): {type(exc.orig or exc).__name__}: {message}; finished cases are "
                "saved, resume the run once it is back.") from None
        raise
