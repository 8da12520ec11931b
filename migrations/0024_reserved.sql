-- Version 0024 is issue 54's backup work (branch i54-backup); this no-op holds its place so 0025 applies on a
-- branch without it (migrations run 1, 2, 3… without gaps). Merged with that branch, its 0024 replaces this file.
SELECT 1;
