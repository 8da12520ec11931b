-- Bounded delegation (seed 004), tightened: a follow-up's caps are the stricter of its parent's and its
-- own profile's (delegation_caps, JSON {"max_depth", "max_per_outcome"}; NULL on a task no outcome asked
-- for: its profile's own), and every task knows the task at the root of its tree (root_task_id; NULL
-- for a root), so the number of descendants a root may have is capped ([dispatch] max_descendants).
ALTER TABLE tasks ADD COLUMN root_task_id INTEGER REFERENCES tasks (id);
ALTER TABLE tasks ADD COLUMN delegation_caps TEXT;
CREATE INDEX tasks_parent ON tasks (parent_task_id) WHERE parent_task_id IS NOT NULL;
CREATE INDEX tasks_root ON tasks (root_task_id) WHERE root_task_id IS NOT NULL;

-- Follow-ups made before this migration: their root, found up the chain of parents.
WITH RECURSIVE chain (id, root) AS (
    SELECT id, id FROM tasks
    WHERE parent_task_id IS NULL AND id IN (SELECT parent_task_id FROM tasks WHERE parent_task_id IS NOT NULL)
    UNION ALL
    SELECT t.id, chain.root FROM tasks t JOIN chain ON t.parent_task_id = chain.id
)
UPDATE tasks SET root_task_id = (SELECT root FROM chain WHERE chain.id = tasks.id)
WHERE parent_task_id IS NOT NULL;
