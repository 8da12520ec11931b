"""`agentd backup DEST` and `agentd restore SRC` (docs/backup-and-archive.md).

Exit codes: 0 done (restore: and `evidence verify` is clean after it); 2 bad input, nothing written (a DEST that
cannot be one, a backup that is unpublished or does not match its manifest, a service of the agent running, a
restore onto another agent or schema version without --yes); 1 a runtime failure, or a restore done whose
evidence verify found something (each finding printed)."""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentd.cli.common import (
    CommandError,
    add_command,
    agent_store,
    option,
    print_json,
    wants_json,
)
from agentd.clock import SystemClock, age
from agentd.edge import printable

if TYPE_CHECKING:
    from agentd.backup.restore import RestoreReport, Target
    from agentd.backup.take import BackupReport


def register(commands: Any) -> None:
    backup = add_command(
        commands,
        "backup",
        cmd_backup,
        "back the agent up while its services run: the database (SQLite's online backup), the sealed evidence, "
        "the config and the chain head, with a manifest of sha256s published last; a folder DEST keeps evidence "
        "once (each later backup copies only what is new), a DEST ending .tar or .tar.gz is one archive file",
    )
    backup.add_argument(
        "dest",
        metavar="DEST",
        nargs="?",
        help="a folder, or an archive file ending .tar, .tar.gz or .tgz (default: [backup] dest)",
    )
    backup.add_argument(
        "--if-due",
        action="store_true",
        help="only when [backup] every has passed since the last good backup (what agentd-backup@NAME.timer runs)",
    )
    restore = add_command(
        commands,
        "restore",
        cmd_restore,
        "put a backup back onto a stopped agent or a fresh state dir: every hash is checked before anything is "
        "written; the database, evidence, config and chain head are restored, what they replace is kept aside; "
        "tasks running at backup time come back through the boot sweep",
    )
    restore.add_argument(
        "src", metavar="SRC", help="a backup folder (its latest backup), one of its backup-ID.json, or an archive"
    )
    restore.add_argument(
        "--yes", action="store_true", help="go ahead onto another agent or schema version (it says what it will do)"
    )


def cmd_backup(args: argparse.Namespace) -> int:
    from agentd.backup.take import take_backup

    with agent_store(args, readonly=True) as (config, _store):
        if args.if_due and not _due(config):
            return 0
        dest = args.dest or config.backup.dest
        if dest is None:
            raise CommandError("backup: give DEST, or set [backup] dest in the agent's TOML")
        report = take_backup(config, Path(dest), SystemClock())
    if wants_json(args):
        print_json(report.as_dict())
        return 0
    _print_backup(report)
    return 0


def _due(config: Any) -> bool:
    """Whether the schedule wants a backup now: [backup] every has passed since the last good one (or there is
    none). Without a schedule, never (the timer is harmless on an agent that set none)."""
    from agentd.outlook.backups import last_backup

    every = config.backup.every_s
    if every is None:
        print("agentd: backup: no [backup] every in the agent's TOML; nothing scheduled", file=sys.stderr)
        return False
    last = last_backup(config.paths.state_dir, SystemClock().now())
    if last is not None and last["age_s"] < every:
        print(f"agentd: backup: not due (the last good backup is {age(last['age_s'])} old, every {age(every)})")
        return False
    return True


def _print_backup(report: BackupReport) -> None:
    head = f"chain head {report.chain_head[0]}" if report.chain_head else "no events yet"
    print(
        printable(
            f"backup {report.backup_id} of agent {report.agent_id} ({head}, schema version {report.schema_version}) "
            f"in {report.manifest}"
        )
    )
    print(
        f"evidence {report.sealed_copied} sealed attempt folder(s) copied, {report.sealed_reused} already there; "
        f"{report.open_attempts} running attempt(s) as they were"
    )
    print(f"size     {report.bytes_total:,} bytes, {report.bytes_copied:,} written now, in {age(report.seconds)}")
    for problem in report.problems:
        print(printable(f"NOTE     {problem}"))


def cmd_restore(args: argparse.Namespace) -> int:
    from agentd.backup.restore import read_manifest, restore, what_differs

    src = Path(args.src)
    target, written = _target(args, src)
    _refuse_root_over_another(target)
    manifest, _ = read_manifest(src)
    notes = what_differs(manifest, target)
    if notes and not args.yes:
        raise CommandError(f"restore: {'; and '.join(notes)}; run again with --yes to go ahead (nothing written)")
    report = restore(src, target, SystemClock())
    report.notes = notes + written + _config_notes(target, src)
    _verify(target, report)
    if wants_json(args):
        print_json(report.as_dict())
    else:
        _print_restore(report)
    return 1 if report.verify_findings else 0


def _refuse_root_over_another(target: Target) -> None:
    """Root would leave a database and evidence the services' user cannot write: restore runs as the state dir's
    owner (docs/backup-and-archive.md, "Restore")."""
    try:
        owner = target.state_dir.stat().st_uid
    except FileNotFoundError:
        return
    if os.geteuid() == 0 and owner != 0:
        import pwd

        try:
            name = pwd.getpwuid(owner).pw_name
        except KeyError:
            name = f"#{owner}"
        raise CommandError(
            f"restore: run it as the state dir's owner: sudo -u {name} agentd … restore (nothing written)"
        )


def _target(args: argparse.Namespace, src: Path) -> tuple[Target, list[str]]:
    """The agent restored into: its TOML's (the one --config/--agent names); on a fresh machine, where that
    TOML is missing, the backup's TOML and constitution are written there first (checked against the manifest)."""
    from agentd.backup.restore import Target, staged_config
    from agentd.cli.fast.cache import resolve_config_path

    path, notice = resolve_config_path(option(args, "config"), option(args, "agent"))
    if notice:
        raise CommandError("restore: name the agent restored into with --config FILE or --agent NAME")
    path = path.absolute()
    if path.exists():
        config = _parsed(path)
        return Target(config.agent.agent_id, config.paths.state_dir, path, True), []
    with staged_config(src) as (_, toml, constitution):
        if toml is None:
            raise CommandError(f"restore: {path} does not exist and the backup holds no config to write there")
        _write_missing(path, toml, 0o640)
        written = [f"wrote the backup's config to {path}"]
        written += _write_constitution(path, toml, constitution)
    config = _parsed(path)
    return Target(config.agent.agent_id, config.paths.state_dir, path, False), written


def _parsed(path: Path) -> Any:
    from agentd.config import parse_config

    config, _problems = parse_config(path)  # folders a fresh machine lacks yet are for `agentd config check`
    return config


def _write_constitution(path: Path, toml: bytes, constitution: dict[str, bytes]) -> list[str]:
    table = tomllib.loads(toml.decode("utf-8")).get("constitution", {})
    written = []
    for key, data in constitution.items():
        named = table.get(f"{key}_path")
        if not isinstance(named, str):
            continue
        target = Path(named) if Path(named).is_absolute() else path.parent / named
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            _write_missing(target, data, 0o640)
            written.append(f"wrote the backup's {key} to {target}")
    return written


def _write_missing(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _config_notes(target: Target, src: Path) -> list[str]:
    """An agent's own TOML is never overwritten: the backup's, where it differs, is written beside it."""
    from agentd.backup.restore import staged_config

    if not target.config_exists:
        return []
    with staged_config(src) as (manifest, toml, _):
        if toml is None or toml == target.config_path.read_bytes():
            return []
        beside = target.config_path.with_name(f"{target.config_path.name}.from-backup-{manifest.backup_id}")
        kept = f"{target.config_path} differs from the backup's config, kept"
        try:
            if not beside.exists():
                _write_missing(beside, toml, 0o600)
        except OSError as exc:  # /etc/agentd is root's; the services' user restores
            return [f"{kept}; the backup's is in SRC at snapshots/{manifest.backup_id}/config.toml ({exc.strerror})"]
        return [f"{kept}; the backup's is at {beside}"]


def _verify(target: Target, report: RestoreReport) -> None:
    from agentd.evidence.verify import verify
    from agentd.store import open_store

    store = open_store(target.state_dir / "agentd.db", SystemClock(), readonly=True)
    try:
        report.verify_findings = [str(f) for f in verify(store, target.state_dir).findings]
    finally:
        store.close()


def _print_restore(report: RestoreReport) -> None:
    head = f"chain head {report.chain_head[0]}" if report.chain_head else "no events"
    print(printable(f"restored backup {report.backup_id} as agent {report.agent_id} into {report.state_dir} ({head})"))
    print(
        f"evidence {report.sealed} sealed attempt folder(s), "
        f"{report.open_attempts} running attempt(s) for the boot sweep"
    )
    if report.set_aside:
        print(printable(f"kept     what it replaced, in {report.set_aside} (delete it once the agent runs)"))
    for note in report.notes:
        print(printable(f"NOTE     {note}"))
    if report.verify_findings:
        print(f"VERIFY   {len(report.verify_findings)} finding(s):", file=sys.stderr)
        for finding in report.verify_findings:
            print(printable(f"  {finding}"), file=sys.stderr)
    else:
        print("verify   clean (`agentd evidence verify`)")
    print("next     start the services; the boot sweep closes the attempts that were running")
