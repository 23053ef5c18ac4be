"""A generic key-value cache (cache_entries: namespace, key, JSON value) replaces the SDBench price table
(test_prices): every cached price is copied into the cache under the SDBench costing's namespace, so re-costing
an existing run still reuses them, and the price table is dropped.

Revision ID: 0011_generic_cache
Revises: 0010_result_status_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_generic_cache"
down_revision = "0010_result_status_index"
branch_labels = None
depends_on = None

PRICE_NAMESPACE = "sdbench.test_prices"
"""The namespace and key rule of ``medeval_core.benchmarks.sdbench.costing.StorePriceCache``, written out here
because a revision must keep meaning what it meant when the benchmark's code changes."""


KEY_SEPARATOR = "\n"
"""A price's key is its method, model and name joined by a newline: none of the three holds one (the name is
whitespace-normalised), and SQL can build it, so the copy is one INSERT ... SELECT that also renders offline."""


def _price_columns() -> list[sa.schema.SchemaItem]:
    """The price table of revision 0005_sdbench_test_prices."""
    return [
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("method", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("price", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("method", "model", "name", name="uq_test_price"),
    ]


def upgrade() -> None:
    cache = op.create_table(
        "cache_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("namespace", "key", name="uq_cache_entry"),
    )
    prices = sa.Table("test_prices", sa.MetaData(), *_price_columns())
    key = prices.c.method + KEY_SEPARATOR + prices.c.model + KEY_SEPARATOR + prices.c.name
    op.execute(cache.insert().from_select(
        ["namespace", "key", "value", "created_at"],
        sa.select(sa.literal(PRICE_NAMESPACE), key, prices.c.price, prices.c.created_at).order_by(prices.c.id)))
    op.drop_table("test_prices")


def downgrade() -> None:
    prices = op.create_table("test_prices", *_price_columns())
    cache = sa.table("cache_entries", sa.column("namespace", sa.String()), sa.column("key", sa.String()),
                     sa.column("value", sa.JSON()), sa.column("created_at", sa.DateTime(timezone=True)))
    rows = op.get_bind().execute(sa.select(cache).where(cache.c.namespace == PRICE_NAMESPACE)).all()
    if rows:
        op.bulk_insert(prices, [dict(zip(("method", "model", "name"), row.key.split(KEY_SEPARATOR, 2), strict=True),
                                     price=row.value, created_at=row.created_at) for row in rows])
    op.drop_table("cache_entries")
