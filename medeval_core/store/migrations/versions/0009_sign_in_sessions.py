"""Sign-ins that survive a reload: one row per browser sign-in, holding only the sha256 of the token the browser
keeps in a cookie, with its expiry and, once signed out or revoked, when.

Revision ID: 0009_sign_in_sessions
Revises: 0008_judge_budget
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_sign_in_sessions"
down_revision = "0008_judge_budget"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sign_in_sessions",
        sa.Column("token_hash", sa.String(), nullable=False),
        sa.Column("annotator", sa.String(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["annotator"], ["annotators.name"]),
        sa.PrimaryKeyConstraint("token_hash"),
    )
    op.create_index("ix_sign_in_sessions_annotator", "sign_in_sessions", ["annotator"])


def downgrade() -> None:
    op.drop_index("ix_sign_in_sessions_annotator", table_name="sign_in_sessions")
    op.drop_table("sign_in_sessions")
