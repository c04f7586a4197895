"""Event log: events, stream versions, the log head (hash chain and position counter), consumer checkpoints.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("position", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("event_id", postgresql.UUID(as_uuid=False), nullable=False, unique=True),
        sa.Column("stream_id", sa.Text, nullable=False),
        sa.Column("stream_version", sa.Integer, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("schema_version", sa.SmallInteger, nullable=False),
        sa.Column("causation_id", postgresql.UUID(as_uuid=False), nullable=True),
        sa.Column("correlation_id", postgresql.UUID(as_uuid=False), nullable=True),
        sa.Column("producer", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", postgresql.JSONB, nullable=False),
        sa.Column("hash", sa.LargeBinary, nullable=False),
        sa.Column("metadata", postgresql.JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
        sa.UniqueConstraint("stream_id", "stream_version", name="events_stream_version_key"),
    )
    op.create_index("events_type_position_idx", "events", ["type", "position"])
    op.create_index("events_producer_position_idx", "events", ["producer", "position"])
    op.create_table(
        "streams",
        sa.Column("stream_id", sa.Text, primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
    )
    op.create_table(
        "log_head",
        sa.Column("id", sa.SmallInteger, primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("hash", sa.LargeBinary, nullable=False),
        sa.CheckConstraint("id = 1", name="log_head_single_row"),
    )
    op.execute("INSERT INTO log_head (id, position, hash) VALUES (1, 0, decode(repeat('00', 32), 'hex'))")
    op.create_table(
        "checkpoints",
        sa.Column("consumer", sa.Text, primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    )
    # The log is append-only: refuse UPDATE and DELETE on recorded events. (A superuser can still disable the
    # trigger; `allot replay --verify` detects any edit or deletion through the hash chain.)
    op.execute(
        """
        CREATE FUNCTION allot_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'the event log is append-only: % on events is not allowed', TG_OP;
        END $$;
        """
    )
    op.execute(
        "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events "
        "FOR EACH ROW EXECUTE FUNCTION allot_events_append_only()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS events_append_only ON events")
    op.execute("DROP FUNCTION IF EXISTS allot_events_append_only()")
    op.drop_table("checkpoints")
    op.drop_table("log_head")
    op.drop_table("streams")
    op.drop_index("events_producer_position_idx", table_name="events")
    op.drop_index("events_type_position_idx", table_name="events")
    op.drop_table("events")
