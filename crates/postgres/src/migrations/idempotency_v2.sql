-- The idempotency table, version 2: each row names its scope (on Lambda the
-- function that wrote it), so that two functions sharing the table and a
-- key prefix never take each other's rows for their own. Rows written
-- before it have none and stay readable: they belong to whoever finds them.
ALTER TABLE {table} ADD COLUMN IF NOT EXISTS scope TEXT;
