-- The demo ledger's table, version 1: one row per account, created by the
-- first payment; payment_count counts the payments applied.
CREATE TABLE IF NOT EXISTS {table} (
    account_id    TEXT PRIMARY KEY,
    balance_cents BIGINT NOT NULL DEFAULT 0,
    payment_count BIGINT NOT NULL DEFAULT 0
);
