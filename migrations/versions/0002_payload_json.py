"""Store event payloads as ``json`` instead of ``jsonb``.

``json`` keeps the canonical text the writer produced (the bytes the hash covers) and only validates it, while
``jsonb`` parses it into a binary tree on every insert and serialises it back on every read: for realistic decision
payloads (1–3 kB) that halves the append rate. Payloads stay queryable with SQL (``payload->>'node'``); cast to
``jsonb`` for containment queries or a GIN index.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE events ALTER COLUMN payload TYPE json USING payload::json")


def downgrade() -> None:
    op.execute("ALTER TABLE events ALTER COLUMN payload TYPE jsonb USING payload::jsonb")
