-- A held tool call's whole input (docs/policy.md, "Asking a person"): what a person approves is what runs,
-- so every surface shows the input whole, not only its summary. The canonical JSON text of the input,
-- redacted by value (agentd/adapters/activity.py `Shown.canonical`), its length in characters and the
-- sha256 of exactly that text (UTF-8); the decision events carry the digest, tying a decision to the input
-- it was shown. A call whose input is longer than HELD_INPUT_MAX_CHARS (agentd/attempt/calls.py) is denied,
-- never held. Rows held before this migration keep NULL: their input was never stored.
ALTER TABLE held_calls ADD COLUMN input_json TEXT;
ALTER TABLE held_calls ADD COLUMN input_chars INTEGER CHECK (input_chars IS NULL OR input_chars = length(input_json));
ALTER TABLE held_calls ADD COLUMN input_sha256 TEXT CHECK (input_sha256 IS NULL OR length(input_sha256) = 64);
