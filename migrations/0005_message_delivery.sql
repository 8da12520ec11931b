-- Message delivery (issue "control plane", item "External message delivery"): an outcome's
-- external_messages are handed to a configured handler ([[message_handlers]]) and delivered beside
-- dispatch, each under its outbox row's idempotency_key, never a new one.
-- * One deliveries row per message handed to a handler, keyed by its outbox row. The outbox row says
--   awaiting_handler while the message is with its handler, applied once delivered, refused once
--   delivery failed for good; the detail (attempts, when next, the last error) lives here.
-- * in_flight: attempt `attempts` was started and its end not yet recorded. It is set, and committed,
--   before anything is sent, so a dispatcher that dies mid-delivery leaves a row its successor
--   re-sends with the same key (the receiver dedupes by it).
-- * ON DELETE CASCADE: retention deletes a pruned task's settled outbox rows, and their deliveries go
--   with them (a task whose message is still pending is never pruned: its outbox row is
--   awaiting_handler).
CREATE TABLE deliveries (
    outbox_id        INTEGER PRIMARY KEY REFERENCES outbox (id) ON DELETE CASCADE,
    handler_id       TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    in_flight        INTEGER NOT NULL DEFAULT 0 CHECK (in_flight IN (0, 1)),
    next_attempt_at  TEXT,               -- pending: when the next attempt is due; NULL once settled
    last_error       TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    delivered_at     TEXT
);
-- The delivery loop's one question: which pending message is due first.
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE status = 'pending';
