"""Log checkpoints: the log head (position + chain hash) signed by the relay with a key kept outside the database.

A table, not events in the log: a checkpoint is a statement *about* the log, made by the relay, which only reads the
log; kept apart, it leaves positions, the bus and every projection as they are, and a retention job can archive a
segment of the log with the checkpoint at its boundary. Deleting rows here gains an attacker nothing for the events
before a remaining checkpoint (docs/security.md, "The anchored chain").

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "log_checkpoints",
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("key_id", sa.Text, nullable=False),
        sa.Column("hash", sa.LargeBinary, nullable=False),
        sa.Column("signed_at", sa.BigInteger, nullable=False),  # µs since the epoch, exactly as signed
        sa.Column("signature", sa.LargeBinary, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("position", "key_id", name="log_checkpoints_pkey"),
    )


def downgrade() -> None:
    op.drop_table("log_checkpoints")
