-- Concord persistence schema (created on start when absent; docs/PERSISTENCE.md).
CREATE TABLE IF NOT EXISTS concord_event_journal (
    persistence_id TEXT NOT NULL,
    seq_nr BIGINT NOT NULL,
    entity_type TEXT NOT NULL,
    slice INTEGER NOT NULL,
    payload BYTEA NOT NULL,
    timestamp_ms BIGINT NOT NULL,
    deleted BOOLEAN NOT NULL DEFAULT false,
    tx_id XID8 NOT NULL DEFAULT pg_current_xact_id(),
    ordering BIGINT GENERATED ALWAYS AS IDENTITY,
    PRIMARY KEY (persistence_id, seq_nr)
);
CREATE INDEX IF NOT EXISTS concord_event_journal_stream
    ON concord_event_journal (entity_type, tx_id, ordering);
CREATE TABLE IF NOT EXISTS concord_snapshot (
    persistence_id TEXT NOT NULL,
    seq_nr BIGINT NOT NULL,
    timestamp_ms BIGINT NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (persistence_id, seq_nr)
);
CREATE TABLE IF NOT EXISTS concord_durable_state (
    persistence_id TEXT PRIMARY KEY,
    entity_type TEXT NOT NULL,
    slice INTEGER NOT NULL,
    revision BIGINT NOT NULL,
    payload BYTEA,
    timestamp_ms BIGINT NOT NULL
);
