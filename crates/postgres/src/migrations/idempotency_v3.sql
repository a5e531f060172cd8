-- The idempotency table, version 3: a COMPLETED row keeps the messages its
-- record emitted (JSON, written by the completion itself, in the
-- transaction of its effect) until they were sent; the sweeper finds those
-- left unsent through a partial index that holds them alone.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS outbox TEXT;
CREATE INDEX IF NOT EXISTS "{index_prefix}_unsent" ON {table} (updated_at)
    WHERE outbox IS NOT NULL;
