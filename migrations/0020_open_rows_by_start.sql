-- The console's queue chart reads the tasks and the attempts open at some moment of its window
-- (agentd/store/charts.py): those that ended inside it (the finished_at and ended_at indexes) and those
-- not ended at all, which without these indexes were a scan of every task and attempt ever kept. Only
-- open rows are in them, so they stay small.
CREATE INDEX tasks_open_created ON tasks (created_at) WHERE finished_at IS NULL;
CREATE INDEX task_attempts_open_started ON task_attempts (started_at) WHERE ended_at IS NULL;
