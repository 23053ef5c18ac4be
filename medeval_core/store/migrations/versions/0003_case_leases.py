"""Case leases (case_leases) and the workers that hold them (run_workers): several processes, on one host or many
pointed at one database, share a run's cases without running one twice. On PostgreSQL the earlier revisions'
timestamps become ``timestamp with time zone``, as the models declare them (SQLModel's UTCDateTime), so a migrated
database and one created from the models are the same; their values were written as UTC and are read as such.

Revision ID: 0003_case_leases
Revises: 0002_kinds_scores_model_calls
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003_case_leases"
down_revision = "0002_kinds_scores_model_calls"
branch_labels = None
depends_on = None

EARLIER_TIMESTAMPS = {
    "runs": ("created_at", "started_at", "finished_at"),
    "case_results": ("started_at", "finished_at"),
    "turns": ("created_at",),
    "judgements": ("created_at",),
    "model_calls": ("created_at",),
    "annotations": ("created_at",),
}


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        for table, columns in EARLIER_TIMESTAMPS.items():
            for column in columns:
                op.alter_column(table, column, type_=sa.DateTime(timezone=True),
                                postgresql_using=f"{column} AT TIME ZONE 'UTC'")
    op.create_table(
        "case_leases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("case_id", sa.String(), nullable=False),
        sa.Column("repetition", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.Column("claim_group", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "case_id", "repetition", name="uq_lease_run_case_rep"),
    )
    op.create_index("ix_case_leases_queue", "case_leases", ["run_id", "done", "id"])
    op.create_table(
        "run_workers",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_run_workers_run_id", "run_workers", ["run_id"])


def downgrade() -> None:
    op.drop_table("run_workers")
    op.drop_table("case_leases")
    if op.get_context().dialect.name == "postgresql":
        for table, columns in EARLIER_TIMESTAMPS.items():
            for column in columns:
                op.alter_column(table, column, type_=sa.DateTime(), postgresql_using=f"{column} AT TIME ZONE 'UTC'")
