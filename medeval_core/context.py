"""Process-wide settings and store, shared by the CLI and every Streamlit rerun of every page.

The settings include the model backends registered on the Models page (their defaults per role), re-read when
the registry changes, so a page sees a newly chosen model without a restart; ``MEDEVAL_<ROLE>_*`` variables still
override them.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy.exc import SQLAlchemyError

from medeval_core.errors import StoreError
from medeval_core.settings import Settings, load_settings
from medeval_core.store import Store, open_store
from medeval_core.store.model_backends import default_choices, registry_stamp


@lru_cache(maxsize=1)
def _file_settings() -> Settings:
    return load_settings()


@lru_cache(maxsize=4)
def _registered_settings(db_url: str, stamp: tuple[int, int | None, int]) -> Settings:
    return load_settings(registered=default_choices(open_store(db_url)))


def current_settings() -> Settings:
    """``configs/`` and the environment, with the registered defaults between them (one COUNT query to see
    whether the registry changed; a store that cannot be opened leaves the file and environment settings)."""
    settings = _file_settings()
    try:
        stamp = registry_stamp(open_store(settings.db_url))
    except (StoreError, SQLAlchemyError, OSError):
        return settings
    return settings if stamp[0] == 0 else _registered_settings(settings.db_url, stamp)


def current_store() -> Store:
    return open_store(current_settings().db_url)


def reset() -> None:
    """Forget cached settings (tests and the app's 'reload settings' action change the environment)."""
    _file_settings.cache_clear()
    _registered_settings.cache_clear()
