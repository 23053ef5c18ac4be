"""Process-wide settings and store, shared by the CLI and every Streamlit rerun of every page."""

from __future__ import annotations

from functools import lru_cache

from medeval_core.settings import Settings, load_settings
from medeval_core.store import Store, open_store


@lru_cache(maxsize=1)
def current_settings() -> Settings:
    return load_settings()


def current_store() -> Store:
    return open_store(current_settings().db_url)


def reset() -> None:
    """Forget cached settings (tests and the app's 'reload settings' action change the environment)."""
    current_settings.cache_clear()
