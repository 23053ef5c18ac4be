"""Case leases (case_leases) and the workers that hold them (run_workers): several processes, on one host or many
pointed at one database, share a run's cases without running one twice.

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


def upgrade() -> None:
    op.create_table(
        "case_leases",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("case_id", sa.String(), nullable=False),
        sa.Column("repetition", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(), nullable=True),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "case_id", "repetition", name="uq_lease_run_case_rep"),
    )
    op.create_index("ix_case_leases_run_id", "case_leases", ["run_id"])
    op.create_index("ix_case_leases_queue", "case_leases", ["run_id", "done", "id"])
    op.create_table(
        "run_workers",
        sa.Column("id", sa.String(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("host", sa.String(), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("threads", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_run_workers_run_id", "run_workers", ["run_id"])


def downgrade() -> None:
    op.drop_table("run_workers")
    op.drop_table("case_leases")
