"""Run kinds and score runs (runs.kind, runs.source_run_id), full scores per result (case_results.scores) and the
record of every model call (model_calls).

Revision ID: 0002_kinds_scores_model_calls
Revises: 0001_baseline
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_kinds_scores_model_calls"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Batch mode: SQLite gets its copy-and-move where an ALTER needs it; other databases get plain ALTERs.
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("kind", sa.String(), nullable=False, server_default="batch"))
        batch.add_column(sa.Column("source_run_id", sa.String(), nullable=True))
        batch.create_index("ix_runs_kind", ["kind"])
        batch.create_index("ix_runs_source_run_id", ["source_run_id"])
    with op.batch_alter_table("case_results") as batch:
        batch.add_column(sa.Column("scores", sa.JSON(), nullable=False, server_default=sa.text("'{}'")))
    op.create_table(
        "model_calls",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("case_id", sa.String(), nullable=False),
        sa.Column("repetition", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("messages_sha256", sa.String(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_model_calls_run_id", "model_calls", ["run_id"])


def downgrade() -> None:
    op.drop_table("model_calls")
    with op.batch_alter_table("case_results") as batch:
        batch.drop_column("scores")
    with op.batch_alter_table("runs") as batch:
        batch.drop_index("ix_runs_source_run_id")
        batch.drop_index("ix_runs_kind")
        batch.drop_column("source_run_id")
        batch.drop_column("kind")
