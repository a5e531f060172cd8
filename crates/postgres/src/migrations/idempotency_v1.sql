-- The idempotency table, version 1: one row per key, its columns named like
-- the DynamoDB item's attributes (same meanings, same units: times in epoch
-- milliseconds, expires_at in epoch seconds). {table} is replaced with the
-- quoted table name, {index_prefix} with the table name (dots as _).
CREATE TABLE IF NOT EXISTS {table} (
    pk              TEXT PRIMARY KEY,
    status          TEXT NOT NULL CHECK (status IN ('STARTED', 'COMPLETED', 'FAILED')),
    version         BIGINT NOT NULL CHECK (version >= 1),
    owner           TEXT NOT NULL,
    payload_hash    TEXT NOT NULL,
    lock_expires_at BIGINT,
    expires_at      BIGINT NOT NULL,
    created_at      BIGINT,
    updated_at      BIGINT,
    attempts        BIGINT,
    origin          TEXT,
    result          TEXT,
    error           TEXT,
    last_error      TEXT
);
-- Stuck keys (`exactly-once-ops stuck`): only STARTED rows are in it, so
-- finding them costs the number of STARTED rows, not the table's size.
CREATE INDEX IF NOT EXISTS "{index_prefix}_started"
    ON {table} (lock_expires_at) WHERE status = 'STARTED';
-- FAILED keys (`exactly-once-ops failed`), the durable record of poison records.
CREATE INDEX IF NOT EXISTS "{index_prefix}_failed"
    ON {table} (updated_at) WHERE status = 'FAILED';
-- Expired rows (`exactly-once-ops purge-expired`): PostgreSQL has no TTL.
CREATE INDEX IF NOT EXISTS "{index_prefix}_expires_at" ON {table} (expires_at);
