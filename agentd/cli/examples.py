"""The examples `--help` ends with, per command, in one table. tests/test_cli_manners.py parses every
line here and runs the harmless ones against a scratch agent, so an example that stops working fails
the suite. Static text only: `agentd --help` stays as fast as it was."""

from __future__ import annotations

# command path (the words after `agentd`) -> [(command line, what it does)]
EXAMPLES: dict[tuple[str, ...], list[tuple[str, str]]] = {
    (): [
        ("agentd init", "create the state dir and the database"),
        ("agentd task add --type example --subject hi", "enqueue a task; prints its id"),
        ("agentd status", "what waits, what runs, which services are live"),
        ("agentd events --last 20", "the newest 20 events of the audit log"),
        ("agentd dispatch --until-idle", "run what is due now, then exit"),
        ("agentd --agent arc status --watch", "an installed agent's status, redrawn every 2 s"),
        ("source <(agentd completion bash)", "tab completion in this shell"),
    ],
    ("task", "add"): [
        ("agentd task add --type example --subject hi --payload '{}'", "a task for the example task type"),
        ("agentd task add --type example --priority 1 --delay 15m", "urgent, but not before 15 minutes from now"),
        ("agentd task add --type example --require-approval", "held until `agentd approve ID`"),
    ],
    ("task", "list"): [
        ("agentd task list --status pending --status running", "what is still to do"),
        ("agentd task list --json --limit 5", "the newest five, for a script"),
    ],
    ("task", "show"): [("agentd task show 1", "task 1: its record, attempts, evidence paths and events")],
    ("task", "pause"): [("agentd task pause 2 --reason 'after the release'", "task 2 is not claimed until resumed")],
    ("task", "resume"): [("agentd task resume 2", "task 2 may be claimed again")],
    ("task", "edit"): [
        ("agentd task edit 2 --priority 1", "task 2 becomes the most urgent"),
        ("agentd task edit 2 --delay 2h", "not before two hours from now"),
    ],
    ("task", "link"): [("agentd task link 3 --after 1", "task 3 runs only after task 1 has completed")],
    ("task", "unlink"): [("agentd task unlink 3 --after 1", "task 3 no longer waits for task 1")],
    ("task", "complete"): [("agentd task complete 3 --reason 'done by hand'", "close waiting task 3 as completed")],
    ("task", "fail"): [("agentd task fail 2 --reason 'no longer wanted'", "close waiting task 2 as a failure")],
    ("events",): [
        ("agentd events --follow", "new events as they happen (Ctrl-C stops)"),
        ("agentd events --task 1", "one task's events"),
        ("agentd events --since 2h --type task_finished", "what finished in the last two hours"),
        ("agentd events --format agent-runtime --last 5", "the newest five as Agent Runtime envelopes"),
    ],
    ("status",): [
        ("agentd status", "counts, what waits and why, what runs, which services are live"),
        ("agentd status --watch 5", "the same, redrawn every 5 seconds until Ctrl-C"),
        ("agentd status --json", "for a script"),
    ],
    ("schedule", "add"): [
        ("agentd schedule add nightly --every 1d --type example --subject nightly", "a task every day"),
    ],
    ("workflow", "start"): [
        ('agentd workflow start goal-loop g1 --context \'{"goal": "tidy the inbox"}\'', "a goal-loop workflow"),
    ],
    ("sensor", "run"): [("agentd sensor run inbox --dry-run", "what the inbox sensor would create; writes nothing")],
    ("dispatch",): [
        ("agentd dispatch --until-idle", "drain what is claimable now and exit"),
        ("agentd dispatch", "the dispatcher service, until SIGTERM (systemd runs it)"),
    ],
    ("install",): [
        ("agentd install --agent arc", "lay out this VM for agent arc (as root)"),
        ("agentd install --agent arc --root /srv/stage", "the same tree under /srv/stage, for packaging"),
    ],
    ("evidence", "verify"): [
        ("agentd evidence verify", "check the event chain and every attempt's evidence"),
        ("agentd evidence verify --task 1 --json", "one task's attempts, for a script"),
    ],
    ("evidence", "accept-rollback"): [
        (
            "agentd evidence accept-rollback --reason 'restored the 02:00 backup'",
            "go on from this database after looking at what it lost",
        ),
    ],
    ("backup",): [
        ("agentd --agent arc backup /var/backups/agentd/arc", "a folder: each later backup copies only new evidence"),
        ("agentd --agent arc backup /mnt/usb/arc.tar.gz --json", "one archive file; what was written, for a script"),
    ],
    ("restore",): [
        ("agentd --agent arc restore /var/backups/agentd/arc", "the latest backup there, onto the stopped agent"),
        ("agentd --agent arc restore /mnt/usb/arc.tar.gz --yes", "go ahead onto another agent or schema version"),
    ],
    ("prune",): [("agentd prune --dry-run", "what [retention] would delete now; deletes nothing")],
    ("completion",): [
        ("source <(agentd completion bash)", "bash: this shell (add the line to ~/.bashrc to keep it)"),
        ("agentd completion zsh > ~/.zfunc/_agentd", "zsh: with ~/.zfunc in fpath, before compinit"),
    ],
    ("init",): [
        ("agentd init", "create the state dir (0700) and the database (0600), migrated"),
        ("agentd --agent arc init", "the same for an installed agent (/etc/agentd/arc.toml)"),
    ],
    ("migrate",): [("agentd migrate", "after an upgrade: apply the migrations the database lacks")],
    ("config", "check"): [
        ("agentd config check", "every problem of the config at once; exit 2 if there is one"),
        ("agentd --config /etc/agentd/arc.toml config check", "check an edited file before restarting"),
    ],
    ("config", "reference"): [("agentd config reference > keys.md", "every key of the identity TOML, as Markdown")],
    ("schema", "export"): [("agentd schema export schemas/", "one JSON Schema file per record into schemas/")],
    ("identity", "show"): [("agentd identity show", "who the agent is: identity, wallets, constitution hashes")],
    ("skills", "list"): [("agentd skills list", "every skill with its description and commands")],
    ("skills", "show"): [("agentd skills show example", "the example skill's manifest and SKILL.md")],
    ("skills", "run"): [("agentd skills run example notes list", "run a skill's command as an attempt would")],
    ("task", "cancel"): [("agentd task cancel 3", "task 3 ends operator_canceled (a running one is stopped first)")],
    ("task", "retry"): [
        ("agentd task retry 3 --attempts 2", "task 3 runs again, twice at most; its earlier attempts stay"),
    ],
    ("workflow", "list"): [("agentd workflow list --status active", "the workflows still running")],
    ("workflow", "show"): [("agentd workflow show 1", "workflow 1: its states, and the task of each step")],
    ("workflow", "signal"): [("agentd workflow signal 1 done", "workflow 1 moves on as if its step said `done`")],
    ("workflow", "unblock"): [
        ("agentd workflow unblock 1", "a blocked workflow re-enters the state it blocked in"),
        ("agentd workflow unblock 1 --state plan", "... or another state"),
    ],
    ("workflow", "cancel"): [("agentd workflow cancel 1", "end workflow 1; its queued step task is canceled")],
    ("schedule", "list"): [("agentd schedule list", "schedules with their next and last runs")],
    ("schedule", "rm"): [("agentd schedule rm nightly", "remove the schedule `nightly`")],
    ("sensor", "list"): [("agentd sensor list", "each sensor's interval, last run and result, next due")],
    ("adapters",): [
        ("agentd adapters", "the configured adapters and what each runs"),
        ("agentd adapters --probe", "is each binary there (and its version), each endpoint reachable"),
    ],
    ("cost",): [
        ("agentd cost --since 2026-11-01T00:00:00Z", "cost and tokens of attempts since then, with totals"),
        ("agentd cost --task 1", "one task's attempts"),
    ],
    ("dispatch", "pause"): [
        ("agentd dispatch pause --reason 'upgrading the model'", "the running attempt ends; nothing new is claimed"),
    ],
    ("dispatch", "resume"): [("agentd dispatch resume", "claim tasks again")],
    ("sensors",): [
        ("agentd sensors --once", "run every sensor that is due now, then exit"),
        ("agentd sensors", "the sensor service, until SIGTERM (systemd runs it)"),
    ],
    ("run",): [("agentd run", "dispatcher, sensors and console in the foreground until Ctrl-C (what `make run` does)")],
    ("uninstall",): [
        ("agentd uninstall --agent arc", "remove arc's units and users; its config and state dir stay"),
        ("agentd uninstall --agent arc --purge --yes", "remove its config and state dir too, for good"),
    ],
    ("evidence", "export"): [
        ("agentd evidence export --format bundle --task 1", "task 1's evidence as a .tar.gz an auditor can verify"),
        ("agentd evidence export --format tracecore --all --out traces", "every attempt as TraceCore into traces/"),
    ],
    ("replay",): [
        ("agentd replay 17", "re-run task 17's last attempt (a script's) from its evidence; compare"),
        (
            "agentd replay 01JD8X1R5W7Q9M3K2N4P6T8V0Y",
            "the same for one attempt, by its id (`agentd task show` lists them)",
        ),
    ],
    ("approvals",): [("agentd approvals", "what waits for an operator, oldest first")],
    ("approve",): [("agentd approve 4 --note 'looked at the payload'", "task 4 may run; the note is recorded")],
    ("deny",): [
        ("agentd deny 5 --reason 'not this week'", "task 5 ends operator_canceled with the reason"),
        ("agentd deny --call 01JC3M9V6V4ZC0K1S1Y4AQ7W2E --reason 'not from here'", "a held tool call is refused"),
    ],
    ("policy", "show"): [("agentd policy show", "each profile's tool policy, in the order its rules are tried")],
    ("policy", "test"): [
        ('agentd policy test operator --tool Bash --input \'{"command": "git push -f"}\'', "which rule decides"),
    ],
    ("ask",): [('agentd ask --tool Bash --input \'{"command": "curl https://example.com"}\'', "inside an attempt")],
    ("demo-model",): [
        ("agentd demo-model", "a keyless model on a free port of 127.0.0.1 until Ctrl-C; prints its URL"),
        ("agentd demo-model --port 8765 --json", "on 127.0.0.1:8765, its URL as JSON (docs/connect-a-model.md)"),
    ],
    ("version",): [("agentd version", "agentd's version and the specs it implements")],
    ("constitution", "proposals"): [("agentd constitution proposals", "constitution changes an agent proposed")],
    ("constitution", "show"): [("agentd constitution show 1", "proposal 1: why, from where, and its diff")],
    ("constitution", "accept"): [("agentd constitution accept 1 --note 'reviewed'", "write proposal 1 into the file")],
    ("constitution", "reject"): [("agentd constitution reject 1 --reason 'too broad'", "decline it; nothing changes")],
    ("outbox", "list"): [("agentd outbox list --state failed", "external messages whose delivery failed")],
    ("outbox", "retry"): [("agentd outbox retry 7", "send entry 7 again, with the same idempotency key")],
    ("fleet", "init"): [
        ("agentd fleet init --dsn-file /etc/agentd/fleet.dsn", "create or migrate the fleet's schema"),
    ],
    ("fleet", "submit"): [
        ("agentd fleet submit --type example --subject hi --key hi-1", "once per key: a free agent takes it"),
        ("agentd fleet submit --batch tasks.jsonl", "one submission per JSON line"),
    ],
    ("fleet", "status"): [("agentd fleet status", "the fleet's tasks by status, and who holds leases")],
    ("fleet", "show"): [("agentd fleet show 12", "fleet task 12: its record, result and history")],
    ("fleet", "cancel"): [("agentd fleet cancel 12", "a queued or leased fleet task ends canceled")],
    ("web",): [
        ("agentd web", "serve the console and the API on [web] listen until SIGTERM"),
        ("agentd web --listen 127.0.0.1:0", "on any free port (it logs the one it got)"),
    ],
    ("web", "token", "add"): [
        ("agentd web token add alice", "alice's token, printed once: log in to the console with it"),
        ("agentd web token add alice --replace", "revoke her token and issue a new one"),
    ],
    ("web", "token", "list"): [("agentd web token list", "every token: name, id, when, by whom, revoked")],
    ("web", "token", "revoke"): [("agentd web token revoke alice", "her requests and console sessions end now")],
    # the groups (`agentd task --help`): their most used commands, each with examples of its own
    ("task",): [
        ("agentd task add --type example --subject hi", "enqueue a task; prints its id"),
        ("agentd task list --status pending", "what waits to run"),
        ("agentd task show 1", "task 1: its record, attempts, evidence paths and events"),
    ],
    ("evidence",): [
        ("agentd evidence verify", "check the event chain and every attempt's evidence"),
        ("agentd evidence export --format bundle --task 1", "task 1's evidence as a .tar.gz an auditor can verify"),
    ],
    ("policy",): [
        ("agentd policy show", "each profile's tool policy, in the order its rules are tried"),
        ('agentd policy test operator --tool Bash --input \'{"command": "ls"}\'', "which rule would decide that call"),
    ],
    ("workflow",): [
        ("agentd workflow list --status active", "the workflows still running"),
        ("agentd workflow show 1", "workflow 1: its states, and the task of each step"),
        ('agentd workflow start goal-loop g2 --context \'{"goal": "tidy"}\'', "start one (once per key: g2)"),
    ],
    ("fleet",): [
        ("agentd fleet status", "the fleet's tasks by status, and who holds leases"),
        ("agentd fleet submit --type example --subject hi --key hi-1", "once per key: a free agent takes it"),
    ],
    ("web", "token"): [
        ("agentd web token add bob", "bob's token, printed once: log in to the console with it"),
        ("agentd web token list", "every token: name, id, when, by whom, revoked"),
        ("agentd web token revoke bob", "his requests and console sessions end now"),
    ],
}


def examples_text(prog: str) -> str:
    """The examples section of `prog`'s help (`agentd task add`), kept as written; empty if none."""
    examples = EXAMPLES.get(tuple(prog.split()[1:]), [])
    lines = [f"  {command}\n      {what}" for command, what in examples]
    return "\nexamples:\n" + "\n".join(lines) + "\n" if lines else ""
