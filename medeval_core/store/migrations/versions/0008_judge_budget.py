"""Judge endpoints' request budgets shared by every process on the store (judge_budget_slots): one row per request
admitted, in flight or answered within the last window.

Revision ID: 0008_judge_budget
Revises: 0007_lazy_queue
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_judge_budget"
down_revision = "0007_lazy_queue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "judge_budget_slots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("endpoint", sa.String(), nullable=False),
        sa.Column("holder", sa.String(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("admitted_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.Column("finished_at", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_judge_budget_slots_endpoint", "judge_budget_slots", ["endpoint"])


def downgrade() -> None:
    op.drop_index("ix_judge_budget_slots_endpoint", table_name="judge_budget_slots")
    op.drop_table("judge_budget_slots")
