"""Model backends registered in the app (the Models page): per role, an OpenAI-compatible endpoint (base URL,
model, and the NAME of the environment variable or Streamlit secret holding its key) or a local Qwen2.5-VL
checkpoint folder, one of them the role's default.

Never a key: ``api_key_env`` must look like a variable name, so a pasted key is refused. The defaults are the second
layer of ``models.for_role``'s precedence: read by ``context.current_settings`` over ``configs/backends.json``,
under the ``MEDEVAL_<ROLE>_*`` variables and a run's own choice (README: "Models").
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from sqlalchemy import UniqueConstraint, func
from sqlmodel import Field as SQLField
from sqlmodel import SQLModel, col, select

from medeval_core.errors import StoreError
from medeval_core.records import utc_now
from medeval_core.settings import BackendChoice, default_api_key_env

if TYPE_CHECKING:
    from medeval_core.store import Store

RegisteredKind = Literal["openai", "transformers"]
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ROLE_NAME = re.compile(r"[a-z][a-z0-9-]*")


class ModelBackendRow(SQLModel, table=True):
    __tablename__ = "model_backends"
    __table_args__ = (UniqueConstraint("role", "name", name="uq_model_backend_role_name"),)

    id: int | None = SQLField(default=None, primary_key=True)
    role: str = SQLField(index=True)
    name: str
    backend: str
    model: str
    base_url: str | None = None
    api_key_env: str = ""
    is_default: bool = False
    created_at: datetime = SQLField(default_factory=utc_now)


class ModelBackend(BaseModel):
    """One registered backend, validated: what the Models page submits and lists."""

    role: str = Field(description="the model role it serves (vlm, judge, chat, gatekeeper, ...)")
    name: str = Field(min_length=1, max_length=80, description="a name to recognise it by")
    backend: RegisteredKind
    model: str = Field(min_length=1, description="the served model name, or the checkpoint folder")
    base_url: str | None = None
    api_key_env: str = ""
    is_default: bool = False
    id: int | None = None

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        value = value.strip().lower()
        if not ROLE_NAME.fullmatch(value):
            raise ValueError("a role is lower-case letters, digits and '-', e.g. judge or second-judge")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str) -> str:
        value = value.strip()
        if value and not ENV_NAME.fullmatch(value):
            raise ValueError("give the NAME of the environment variable or secret that holds the key (e.g. "
                             "MEDEVAL_JUDGE_API_KEY), never the key itself")
        return value

    @model_validator(mode="after")
    def _endpoint(self) -> ModelBackend:
        if self.backend == "openai":
            if not self.base_url or not re.match(r"https?://", self.base_url.strip()):
                raise ValueError("an OpenAI-compatible endpoint needs a base URL starting with http:// or https:// "
                                 "(usually ending in /v1)")
            self.base_url = self.base_url.strip().rstrip("/")
            self.api_key_env = self.api_key_env or default_api_key_env(self.role)
        else:
            self.base_url = None
            self.api_key_env = self.api_key_env or default_api_key_env(self.role)
        return self

    def choice(self) -> BackendChoice:
        """As settings use it for the role."""
        return BackendChoice(backend=self.backend, model=self.model, base_url=self.base_url,
                             api_key_env=self.api_key_env)


def _record(row: ModelBackendRow) -> ModelBackend:
    return ModelBackend.model_validate(row, from_attributes=True)


def list_backends(store: Store) -> list[ModelBackend]:
    """Every registered backend, by role then name."""
    with store.session() as session:
        rows = session.exec(select(ModelBackendRow).order_by(col(ModelBackendRow.role), col(ModelBackendRow.name)))
        return [_record(row) for row in rows]


def register_backend(store: Store, backend: ModelBackend) -> ModelBackend:
    """Store a new backend; the first of a role (or one marked ``is_default``) becomes the role's default."""
    with store.session() as session:
        same_role = list(session.exec(select(ModelBackendRow).where(ModelBackendRow.role == backend.role)))
        if any(row.name == backend.name for row in same_role):
            raise StoreError(f"The {backend.role} role already has a backend called {backend.name!r}; choose "
                             "another name or remove that one first.")
        make_default = backend.is_default or not same_role
        if make_default:
            for row in same_role:
                row.is_default = False
                session.add(row)
        row = ModelBackendRow(**backend.model_dump(exclude={"id", "is_default"}), is_default=make_default)
        session.add(row)
        session.commit()
        session.refresh(row)
        return _record(row)


def set_default(store: Store, backend_id: int) -> ModelBackend:
    with store.session() as session:
        chosen = session.get(ModelBackendRow, backend_id)
        if chosen is None:
            raise StoreError(f"No registered backend with id {backend_id}; reload the Models page.")
        for row in session.exec(select(ModelBackendRow).where(ModelBackendRow.role == chosen.role)):
            row.is_default = row.id == backend_id
            session.add(row)
        session.commit()
        session.refresh(chosen)
        return _record(chosen)


def remove_backend(store: Store, backend_id: int) -> None:
    with store.session() as session:
        row = session.get(ModelBackendRow, backend_id)
        if row is None:
            raise StoreError(f"No registered backend with id {backend_id}; reload the Models page.")
        session.delete(row)
        session.commit()


def default_choices(store: Store) -> dict[str, BackendChoice]:
    """Role -> the registered default's settings, for the roles that have one."""
    with store.session() as session:
        rows = session.exec(select(ModelBackendRow).where(col(ModelBackendRow.is_default).is_(True)))
        return {row.role: _record(row).choice() for row in rows}


def registry_stamp(store: Store) -> tuple[int, int | None, int]:
    """Changes whenever a backend is added, removed or made default: keys the settings cache."""
    with store.session() as session:
        count, newest = session.exec(select(func.count(), func.max(ModelBackendRow.id))).one()
        default_ids = session.exec(select(func.coalesce(func.sum(ModelBackendRow.id), 0))
                                   .where(col(ModelBackendRow.is_default).is_(True))).one()
    return int(count), newest, int(default_ids or 0)
