"""The SDBench price cache (test_prices): each priced test name per (costing method, pricing model, name).

Revision ID: 0005_sdbench_test_prices
Revises: 0004_model_backends
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_sdbench_test_prices"
down_revision = "0004_model_backends"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "test_prices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("price", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("method", "model", "name", name="uq_test_price"),
    )


def downgrade() -> None:
    op.drop_table("test_prices")
