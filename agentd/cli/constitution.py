"""`agentd constitution proposals|show|accept|reject`: the operator's side of the proposal lane
(seed 000 §1b, agentd/control/constitution.py). An agent proposes; only these commands decide."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from agentd.cli.common import (
    add_command,
    agent_store,
    note,
    print_fields,
    print_json,
    print_table,
    store_command,
    wants_json,
)
from agentd.clock import SystemClock, format_ts
from agentd.edge import printable

if TYPE_CHECKING:
    from agentd.records.constitution import ConstitutionProposalRecord


def register(commands: Any) -> None:
    group = commands.add_parser(
        "constitution", help="review the SOUL.md / PURPOSE.md revisions an agent proposed"
    ).add_subparsers(dest="constitution_command", metavar="SUBCOMMAND", required=True)
    listing = add_command(group, "proposals", cmd_proposals, "list pending constitution proposals, oldest first")
    listing.add_argument("--all", action="store_true", help="also those accepted, rejected or superseded")
    show = add_command(group, "show", cmd_show, "a proposal's reason and origin, and its diff against the file now")
    show.add_argument("proposal_id", metavar="ID", help="a proposal's id (`constitution proposals`)")
    accept = add_command(
        group,
        "accept",
        cmd_accept,
        "write the proposed text over SOUL.md/PURPOSE.md and move [constitution] version on; refused if the "
        "document changed since it was proposed",
    )
    accept.add_argument("proposal_id", metavar="ID", help="a proposal's id (`constitution proposals`)")
    accept.add_argument("--note", metavar="TEXT", type=note("--note"), help="recorded with the decision")
    reject = add_command(group, "reject", cmd_reject, "decline a proposal, saying why; the document is not touched")
    reject.add_argument("proposal_id", metavar="ID", help="a proposal's id (`constitution proposals`)")
    reject.add_argument(
        "--reason", metavar="TEXT", type=note("--reason", required=True), required=True, help="why (recorded)"
    )


def cmd_proposals(args: argparse.Namespace) -> int:
    def said(proposals: list[ConstitutionProposalRecord]) -> None:
        if not proposals:
            print("no pending constitution proposals" if not args.all else "no constitution proposals")
        else:
            _print_proposals(proposals)

    return store_command(
        args, lambda _, store: store.constitution_proposals(include_decided=args.all), said, readonly=True
    )


def _print_proposals(proposals: list[ConstitutionProposalRecord]) -> None:
    print_table(
        ["ID", "DOCUMENT", "STATUS", "TASK", "PROPOSED", "REASON"],
        [
            (p.proposal_id, p.document, p.status, p.task_id, format_ts(p.created_at), _short(p.reason))
            for p in proposals
        ],
    )


def cmd_show(args: argparse.Namespace) -> int:
    from agentd.control.constitution import changed_since, current_sha256, document_path, proposal_diff

    with agent_store(args, readonly=True) as (config, store):
        proposal = store.get_constitution_proposal(args.proposal_id)
    diff, stale = proposal_diff(config, proposal), changed_since(config, proposal)
    if wants_json(args):
        current = current_sha256(config, proposal.document)
        print_json(
            {**proposal.model_dump(mode="json"), "current_sha256": current, "changed_since": stale, "diff": diff}
        )
        return 0
    _print_proposal(proposal, str(document_path(config, proposal.document)))
    if proposal.status == "pending" and stale:
        print("\nthe document changed since this was proposed: `agentd constitution accept` would refuse it")
    print()
    sys.stdout.write(printable(diff, keep_newlines=True) if diff else "(no difference from the file now)\n")
    return 0


def cmd_accept(args: argparse.Namespace) -> int:
    from agentd.control.constitution import accept_proposal

    with agent_store(args) as (config, store):
        accepted = accept_proposal(config, store, args.proposal_id, note=args.note, now=SystemClock().now())
    proposal = accepted.proposal
    if accepted.overridden:
        print(
            f"agentd: an environment override (AGENTD_CONSTITUTION__VERSION) sets the version the services see; "
            f"{accepted.config_path} now says {proposal.version_after}",
            file=sys.stderr,
        )
    if wants_json(args):
        print_json({**proposal.model_dump(mode="json", exclude={"proposed_text"}), "path": str(accepted.path)})
        return 0
    written = "already held the proposed text" if accepted.already_written else "written"
    print(
        f"accepted {proposal.proposal_id}: {accepted.path} {written} (sha256 {proposal.base_sha256[:12]}… → "
        f"{proposal.proposed_sha256[:12]}…); [constitution] version {proposal.version_before} → "
        f"{proposal.version_after} in {accepted.config_path}"
    )
    print("a running dispatcher keeps the constitution it loaded: restart the services to use this one")
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    from agentd.control.constitution import reject_proposal

    return store_command(
        args,
        lambda _, store: reject_proposal(store, args.proposal_id, reason=args.reason, now=SystemClock().now()),
        lambda proposal: print(f"rejected {proposal.proposal_id} ({proposal.document}); the document was not touched"),
        as_json=lambda proposal: proposal.model_dump(mode="json", exclude={"proposed_text"}),
    )


def _print_proposal(proposal: ConstitutionProposalRecord, path: str) -> None:
    print_fields(
        [
            ("proposal", proposal.proposal_id),
            ("document", f"{proposal.document} ({path})"),
            ("status", proposal.status),
            ("reason", proposal.reason),
            ("from", f"task {proposal.task_id}, attempt {proposal.attempt_id}"),
            ("proposed_at", format_ts(proposal.created_at)),
            ("base_sha256", proposal.base_sha256),
            ("proposed_sha256", proposal.proposed_sha256),
            ("decided", _decision(proposal)),
            ("version", f"{proposal.version_before} → {proposal.version_after}" if proposal.version_after else None),
        ]
    )


def _decision(proposal: ConstitutionProposalRecord) -> str | None:
    if proposal.decided_at is None:
        return None
    note = f": {proposal.decision_note}" if proposal.decision_note else ""
    return f"{proposal.status} by {proposal.decided_by} at {format_ts(proposal.decided_at)}{note}"


def _short(text: str, width: int = 60) -> str:
    line = text.split("\n")[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"
