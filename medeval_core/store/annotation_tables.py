"""The annotation tables (revision 0006_annotations): annotator accounts, sign-in attempts, tasks, their items and
who is assigned which item. The answers themselves are rows of ``annotations`` (one per annotator, item and
criterion; an edit is a new row naming the row it supersedes).

An item's ``payload`` is what the annotator is shown (already blinded when the task was made); its ``key`` is
what only an administrator's report reads (which run is on which side, the judge's verdict, the patient system)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Column, UniqueConstraint
from sqlmodel import Field, SQLModel

from medeval_core.records import utc_now


class AnnotatorRow(SQLModel, table=True):
    __tablename__ = "annotators"

    name: str = Field(primary_key=True)
    passcode_hash: str | None = None
    """An argon2 hash (``$argon2id$...``); None for an account that signs in only through OpenID Connect."""
    is_admin: bool = False
    active: bool = True
    created_at: datetime = Field(default_factory=utc_now)


class SignInAttemptRow(SQLModel, table=True):
    __tablename__ = "sign_in_attempts"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True)
    ok: bool
    created_at: datetime = Field(default_factory=utc_now, index=True)


class SignInSessionRow(SQLModel, table=True):
    """A browser's sign-in (revision 0009_sign_in_sessions): the browser keeps a random token in a cookie, the store
    only its sha256, so a copy of the database cannot sign anybody in. Expiring and revocable."""

    __tablename__ = "sign_in_sessions"

    token_hash: str = Field(primary_key=True)
    annotator: str = Field(foreign_key="annotators.name", index=True)
    created_at: datetime = Field(default_factory=utc_now)
    expires_at: datetime
    revoked_at: datetime | None = None


class AnnotationTaskRow(SQLModel, table=True):
    __tablename__ = "annotation_tasks"

    id: str = Field(primary_key=True)
    kind: str
    title: str
    criteria: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    config: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_by: str
    created_at: datetime = Field(default_factory=utc_now)


class AnnotationItemRow(SQLModel, table=True):
    __tablename__ = "annotation_items"

    id: str = Field(primary_key=True)
    task_id: str = Field(foreign_key="annotation_tasks.id", index=True)
    position: int
    case_id: str
    payload: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    key: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class AnnotationAssignmentRow(SQLModel, table=True):
    __tablename__ = "annotation_assignments"
    __table_args__ = (UniqueConstraint("item_id", "annotator", name="uq_assignment_item_annotator"),)

    id: int | None = Field(default=None, primary_key=True)
    task_id: str = Field(foreign_key="annotation_tasks.id", index=True)
    item_id: str = Field(foreign_key="annotation_items.id", index=True)
    annotator: str = Field(foreign_key="annotators.name", index=True)
