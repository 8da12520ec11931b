"""Putting an agent on a VM: `agentd install` and `agentd uninstall`."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any

from agentd.cli.common import add_command, print_json, wants_json
from agentd.errors import InputError
from agentd.faults import refused_about


def register(commands: Any) -> None:
    inst = add_command(
        commands,
        "install",
        cmd_install,
        "lay out this VM for an agent: its TOML with ports of its own, units and socket units, three users, folders",
    )
    inst.description = (
        "Lay out this VM for an agent (as root): /etc/agentd/NAME.toml (the example, with ports no other agent's "
        "TOML names and nothing here listens on; an existing one is never replaced), the dispatch, sensors and web "
        "units with a socket unit holding each port, the agent's three users (its services, its attempts, its "
        "sensors) and their folders. Running it again changes nothing (docs/install-and-deploy.md)."
    )
    inst.add_argument(
        "--root",
        default="/",
        metavar="DIR",
        help="lay the same tree out under DIR instead of / (a staging tree for another machine: no users are made, "
        "ports are the defaults, never this machine's listeners; run config check on the target)",
    )
    inst.add_argument(
        "--agentd-bin",
        metavar="PATH",
        help="the agentd the units run (default: the one running this command); must be outside /tmp, /home, …",
    )
    un = add_command(
        commands,
        "uninstall",
        cmd_uninstall,
        "stop and remove an agent's units; its config and state stay unless --purge --yes",
    )
    un.add_argument("--root", default="/", metavar="DIR", help="the tree install laid out under DIR")
    un.add_argument("--purge", action="store_true", help="also delete the agent's config and state dir (needs --yes)")
    un.add_argument("--yes", action="store_true", help="confirm --purge: its database and evidence are gone for good")


def _agent(args: argparse.Namespace) -> str:
    agent = getattr(args, "agent", None)
    if not agent:
        raise InputError("--agent NAME is required: the agent to install (e.g. --agent arc)")
    return str(agent)


def _agentd_bin(args: argparse.Namespace) -> Path:
    """The agentd the units should run: --agentd-bin, else the one beside this Python (the agentd that
    is running install), else the one on PATH."""
    if args.agentd_bin:
        return Path(args.agentd_bin)
    beside = Path(sys.executable).parent / "agentd"
    found = beside if beside.is_file() else shutil.which("agentd")
    return Path(found).resolve() if found else beside


def cmd_install(args: argparse.Namespace) -> int:
    from agentd.install import enable_command, install

    agent = _agent(args)
    try:
        report = install(agent, Path(args.root), _agentd_bin(args))
    except OSError as exc:  # a --root the system refuses, a full disk, a read-only /etc: one line
        raise InputError(
            f"cannot lay out agent {agent} under {args.root}: {refused_about(exc, args.root)}; install is safe "
            "to run again once that is fixed (what it wrote is kept, or written again if it differs)"
        ) from None
    for warning in report.warnings:
        print(f"agentd: warning: {warning}", file=sys.stderr)
    if wants_json(args):
        print_json({**vars(report), "enable": enable_command(agent, report.sockets)})
        return 0
    for path in report.changed:
        print(f"wrote     {path}")
    for path in report.kept:
        print(f"kept      {path} (exists; not replaced)")
    if report.ports:
        staged = "" if Path(args.root) == Path("/") else " (staged: the tree's own agents moved them, not this machine)"
        print(f"metrics   {report.ports[0]} (dispatch) and {report.ports[1]} (sensors) on 127.0.0.1{staged}")
        print(f"console   {report.ports[2]} on 127.0.0.1 (docs/web.md; `agentd web token add NAME` for a login)")
    print(f"users     {report.users}")
    if not report.changed:
        print("nothing to change: already installed")
    print(f"\nnext: {enable_command(agent, report.sockets)}")
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    from agentd.install import uninstall

    agent = _agent(args)
    report = uninstall(agent, Path(args.root), purge=args.purge, yes=args.yes)
    if wants_json(args):
        print_json(vars(report))
        return 0
    for path in report.changed:
        print(f"removed   {path}")
    for path in report.kept:
        print(f"kept      {path} (agentd uninstall --purge --yes deletes it)")
    return 0
