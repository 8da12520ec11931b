"""`agentd evidence verify`'s witnessed head and the auditor's check from the archive alone
(docs/backup-and-archive.md, "Witnessed head"): the parts of agentd/cli/evidence.py that reach a bucket or the
fleet, loaded only when one is asked for (boto3 is the `archive` extra's)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from agentd.cli.common import print_json, wants_json
from agentd.config import Config
from agentd.edge import printable
from agentd.errors import InputError
from agentd.evidence.verify import Finding
from agentd.store import Store
from agentd.vocabulary import counted

NOT_ASKED = (
    "give --against (the archive) or --against-fleet to compare: a chain rolled back with its whole state dir "
    "looks clean without a head held elsewhere"
)


@dataclass
class Witness:
    """The local chain against a witnessed head: compared or why not, where, and what was found."""

    sources: list[str] = field(default_factory=list)
    heads: dict[str, tuple[int, str] | None] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    not_compared: str | None = None

    def line(self) -> str:
        if self.not_compared is not None:
            return f"witness  not compared with a witnessed head: {self.not_compared}"
        shown = "; ".join(
            f"{source}: {head[0]}:{head[1][:12]}…" if head else f"{source}: no head witnessed yet"
            for source, head in self.heads.items()
        )
        if self.findings:
            verdict = "ROLLBACK (above)"
        elif any(self.heads.values()):
            verdict = "the local chain holds the witnessed head"
        else:
            verdict = "nothing witnessed yet to compare with"
        return f"witness  {verdict}; {shown}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "compared": self.not_compared is None,
            "why_not": self.not_compared,
            "heads": {s: ({"sequence": h[0], "hash": h[1]} if h else None) for s, h in self.heads.items()},
            "rollback": bool(self.findings),
            "witnessed_any": any(self.heads.values()),
        }


def compare_with_witness(args: argparse.Namespace, config: Config, store: Store) -> Witness:
    """What --against and --against-fleet find; without either, a Witness that says it could not compare."""
    from agentd.archive.audit import archived_chain, rollback_findings, witnessed_heads

    found = Witness()
    if args.against is None and not args.against_fleet:
        found.not_compared = NOT_ASKED
        return found
    if args.against is not None:
        bucket = _bucket(args.against, args, config, config.agent.agent_id)
        source = f"archive {bucket.location.url}"
        heads = witnessed_heads(bucket)
        head = max(heads.items()) if heads else None
        found.heads[source] = head
        if head is not None:
            chain = archived_chain(bucket)
            found.findings += rollback_findings(store, head, chain.hashes() | heads, chain.describe)
    if args.against_fleet:
        heads = dict(_fleet_heads(config))
        head = max(heads.items()) if heads else None
        found.heads["fleet"] = head
        if head is not None:
            found.findings += [f for f in rollback_findings(store, head, heads) if f not in found.findings]
    return found


def _fleet_heads(config: Config) -> list[tuple[int, str]]:
    if config.fleet.dsn_file is None:
        raise InputError("--against-fleet: this agent has no fleet ([fleet] dsn_file is not set)")
    from agentd.config.environment import read_dsn_file
    from agentd.store import FleetQueue

    queue = FleetQueue.open(read_dsn_file(config.fleet.dsn_file))
    try:
        return queue.witnessed_heads(config.agent.agent_id)
    finally:
        queue.close()


def _bucket(url: str, args: argparse.Namespace, config: Config | None, agent: str) -> Any:
    """The archive `url` names ('' : the agent's [archive]), with its credentials."""
    from agentd.archive.bucket import Bucket
    from agentd.archive.location import Location, parse_archive_url
    from agentd.config.environment import read_archive_credentials as read_credentials

    if not url:
        if config is None or not config.archive.enabled or config.archive.credentials_file is None:
            raise InputError("--against: this agent has no [archive] bucket; give one: --against s3://BUCKET/PREFIX/")
        section, keys = config.archive, config.archive.credentials_file
        return Bucket(Location.of(section), agent, read_credentials(keys), timeout_s=section.timeout_s)
    location = parse_archive_url(url, args.endpoint_url, args.region)
    credentials = read_credentials(args.credentials_file) if args.credentials_file is not None else None
    return Bucket(location, agent, credentials)


def audit_command(args: argparse.Namespace) -> int:
    """`agentd evidence verify --archive URL --agent NAME`: the auditor's check from the bucket alone."""
    from agentd.archive.audit import audit_archive
    from agentd.archive.location import agent_problem

    agent = getattr(args, "agent", None)  # the common --agent NAME: here the archive's agent, no config read
    if agent is None:
        raise InputError("--archive needs --agent NAME: the agent whose archive it is (its agent_id)")
    if problem := agent_problem(agent):
        raise InputError(f"--agent: {problem}")
    if args.against is not None or args.against_fleet or args.task is not None or args.expect_head is not None:
        raise InputError(
            "--archive checks the archive alone: --against, --against-fleet, --task and --expect-head need the VM"
        )
    audit = audit_archive(_bucket(args.archive, args, None, agent))
    if wants_json(args):
        print_json(audit.as_dict())
    else:
        for finding in audit.findings:
            print(printable(str(finding)))
        for note in audit.notes:
            print(printable(f"note: {note}"))
        head = f"witnessed head {audit.head[0]}:{audit.head[1]}" if audit.head else "no witnessed head"
        verdict = "clean" if not audit.findings else counted(len(audit.findings), "finding")
        print(
            f"{verdict}: {counted(audit.events, 'event')}, {counted(audit.attempts, 'attempt')} checked from the "
            f"archive; {head}"
        )
    return 0 if not audit.findings else 1
