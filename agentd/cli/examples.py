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
    ("prune",): [("agentd prune --dry-run", "what [retention] would delete now; deletes nothing")],
    ("completion",): [
        ("source <(agentd completion bash)", "bash: this shell (add the line to ~/.bashrc to keep it)"),
        ("agentd completion zsh > ~/.zfunc/_agentd", "zsh: with ~/.zfunc in fpath, before compinit"),
    ],
}


def examples_text(prog: str) -> str:
    """The examples section of `prog`'s help (`agentd task add`), kept as written; empty if none."""
    examples = EXAMPLES.get(tuple(prog.split()[1:]), [])
    lines = [f"  {command}\n      {what}" for command, what in examples]
    return "\nexamples:\n" + "\n".join(lines) + "\n" if lines else ""
