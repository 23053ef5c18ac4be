"""Model backends registered on the Models page (model_backends): per role, an endpoint or a checkpoint folder
and the name of the variable holding its key (never the key), one of them the role's default.

Revision ID: 0004_model_backends
Revises: 0003_case_leases
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004_model_backends"
down_revision = "0003_case_leases"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_backends",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("base_url", sa.String(), nullable=True),
        sa.Column("api_key_env", sa.String(), nullable=False),
        sa.Column("is_default", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("role", "name", name="uq_model_backend_role_name"),
    )
    op.create_index("ix_model_backends_role", "model_backends", ["role"])


def downgrade() -> None:
    op.drop_index("ix_model_backends_role", table_name="model_backends")
    op.drop_table("model_backends")
