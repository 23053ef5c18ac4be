"""The home page's controller: the catalogued pages and the state of the data sources, model backends and store
under the current settings."""

from __future__ import annotations

from typing import Any

from medeval_core.catalog import pages
from medeval_core.context import current_settings
from medeval_core.registry import PageInfo
from medeval_core.settings import SettingsError, runtime_versions
from medeval_core.status import BackendStatus, DataRow, StoreStatus, backends_status, data_status_rows, store_status

__all__ = ["Home", "PageInfo", "SettingsError", "pages"]


class Home:
    """The settings read once per script run (``SettingsError`` when they cannot be loaded) and what they find."""

    def __init__(self) -> None:
        self.settings = current_settings()

    @property
    def data_dir(self) -> str:
        return str(self.settings.data_dir)

    def data_sources(self) -> list[DataRow]:
        return data_status_rows(self.settings)

    def backends(self) -> list[BackendStatus]:
        return backends_status(self.settings)

    def store(self) -> StoreStatus:
        return store_status(self.settings)

    def settings_hash(self) -> str:
        return self.settings.settings_hash()

    def effective_settings(self) -> dict[str, Any]:
        return self.settings.effective()

    @staticmethod
    def versions() -> dict[str, str | None]:
        return runtime_versions()
