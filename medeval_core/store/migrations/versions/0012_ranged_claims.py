"""A run's queue is claimed in ranges (case_claims: one row per claim, a range of the wave's keys) instead of one
lease row per case (case_leases, dropped); runs.queue_has_finished says whether claims must look for keys
finished before the wave. A wave in progress is closed (its queue fields cleared): stop a run's
workers before upgrading; a resume then opens a new wave of the run's unfinished cases. Results are kept.

Revision ID: 0012_ranged_claims
Revises: 0011_generic_cache
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_ranged_claims"
down_revision = "0011_generic_cache"
branch_labels = None
depends_on = None


def _close_open_waves() -> None:
    op.execute(sa.text("UPDATE runs SET queue_total = NULL, queue_cursor = NULL"))


def upgrade() -> None:
    op.drop_index("ix_case_leases_queue", table_name="case_leases")
    op.drop_table("case_leases")
    _close_open_waves()
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("queue_has_finished", sa.Boolean(), nullable=True))
    op.create_table(
        "case_claims",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("start", sa.Integer(), nullable=False),
        sa.Column("stop", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.String(), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("done", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_case_claims_queue", "case_claims", ["run_id", "done", "start"])


def downgrade() -> None:
    # The lease table of revisions 0003_case_leases to 0011, empty: a resume after it opens a new wave.
    op.drop_index("ix_case_claims_queue", table_name="case_claims")
    op.drop_table("case_claims")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("queue_has_finished")
    _close_open_waves()
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
