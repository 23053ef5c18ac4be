"""Alembic revisions of medeval's store, oldest first (loaded by Alembic from this folder, not imported)."""
