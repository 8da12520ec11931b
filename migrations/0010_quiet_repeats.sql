-- Seed 000 §14 events without the noise (issue 21): a repeat leaves one event per thing repeated.
-- * sensor_events.deduped_at: when the first repeat of this (sensor_id, dedupe_key) was seen and its
--   sensor_event_deduped written; set once, so later repeats write nothing (the run still counts them).
-- * schedules: the open task the latest skipped slot waited for (its schedule_slot_skipped event is
--   written once per such task), the slots skipped while it stayed open, and all slots ever skipped.
--   No foreign key: retention may prune the task while the count stays.
ALTER TABLE sensor_events ADD COLUMN deduped_at TEXT;

ALTER TABLE schedules ADD COLUMN skipped_for_task_id INTEGER;
ALTER TABLE schedules ADD COLUMN skipped_slots INTEGER NOT NULL DEFAULT 0;
ALTER TABLE schedules ADD COLUMN skipped_slots_total INTEGER NOT NULL DEFAULT 0;
