"""Clinician annotation: annotator accounts (argon2 hashes), sign-in attempts (the rate limit holds across
sessions and processes), tasks, their items and assignments; ``annotations.supersedes_id`` links an edit to the
answer it replaces (answers are appended, never overwritten).

Revision ID: 0006_annotations
Revises: 0005_sdbench_test_prices
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_annotations"
down_revision = "0005_sdbench_test_prices"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "annotators",
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("passcode_hash", sa.String(), nullable=True),
        sa.Column("is_admin", sa.Boolean(), nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "sign_in_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_sign_in_attempts_name", "sign_in_attempts", ["name"])
    op.create_index("ix_sign_in_attempts_created_at", "sign_in_attempts", ["created_at"])
    op.create_table(
        "annotation_tasks",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("title", sa.String(), nullable=False),
        sa.Column("criteria", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("created_by", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "annotation_items",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.String(), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("key", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["annotation_tasks.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_annotation_items_task_id", "annotation_items", ["task_id"])
    op.create_table(
        "annotation_assignments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("item_id", sa.String(), nullable=False),
        sa.Column("annotator", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["annotation_tasks.id"]),
        sa.ForeignKeyConstraint(["item_id"], ["annotation_items.id"]),
        sa.ForeignKeyConstraint(["annotator"], ["annotators.name"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("item_id", "annotator", name="uq_assignment_item_annotator"),
    )
    op.create_index("ix_annotation_assignments_task_id", "annotation_assignments", ["task_id"])
    op.create_index("ix_annotation_assignments_item_id", "annotation_assignments", ["item_id"])
    op.create_index("ix_annotation_assignments_annotator", "annotation_assignments", ["annotator"])
    with op.batch_alter_table("annotations") as batch:
        batch.add_column(sa.Column("supersedes_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("annotations") as batch:
        batch.drop_column("supersedes_id")
    for table in ("annotation_assignments", "annotation_items", "annotation_tasks", "sign_in_attempts",
                  "annotators"):
        op.drop_table(table)
