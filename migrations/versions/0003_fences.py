"""Fences: the current leadership term of every decider that runs under leader election.

A leader elected through a Kubernetes Lease records its term here before it decides anything
(``allot_eventstore.postgres.PostgresEventStore.advance_fence``). Every append made under a term checks it in the same
transaction, under the log's head lock, and is refused when a newer term holds: a paused or partitioned ex-leader
cannot write to the log after its successor started.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "fences",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("term", sa.BigInteger, nullable=False),
        sa.Column("holder", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )


def downgrade() -> None:
    op.drop_table("fences")
