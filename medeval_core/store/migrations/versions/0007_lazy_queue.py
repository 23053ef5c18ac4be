"""A wave's queue written as workers claim (runs.queue_total, runs.queue_cursor): a run starts without writing a
lease row per case; claims give the next chunk of keys their rows.

Revision ID: 0007_lazy_queue
Revises: 0006_annotations
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_lazy_queue"
down_revision = "0006_annotations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable columns: plain ALTERs on SQLite too, and a wave in progress (both unset) keeps every row it has.
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("queue_total", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("queue_cursor", sa.Integer(), nullable=True))


def downgrade() -> None:
    # A wave then in progress keeps only the rows written so far: a resume after it opens a new, complete one.
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("queue_cursor")
        batch.drop_column("queue_total")
