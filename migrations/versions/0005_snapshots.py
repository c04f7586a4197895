"""Snapshots of the services' projections: an optimisation of restart, never a source of truth.

A row is one consumer's projection at its checkpoint ``position``, encoded data-only (``allot_runtime.statecodec``,
version ``format``), made under the configuration whose hash is ``config_hash``, with the projection's digest and the
SHA-256 of the state bytes. A service restores the newest row of its current format and configuration, checks the
bytes' hash and the digest, and folds the log from there; anything wrong and it folds from position 0
(docs/adr/0011-bounded-verification.md).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "snapshots",
        sa.Column("consumer", sa.Text, nullable=False),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("format", sa.Integer, nullable=False),
        sa.Column("config_hash", sa.Text, nullable=False),
        sa.Column("digest", sa.Text, nullable=False),
        sa.Column("state", sa.LargeBinary, nullable=False),
        sa.Column("state_hash", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("consumer", "position", name="snapshots_pkey"),
    )


def downgrade() -> None:
    op.drop_table("snapshots")
