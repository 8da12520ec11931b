"""An installed agent's identity TOML, written from the embedded example with its comments kept:
the example edited in place for the agent's name, paths, run user and metrics ports (`agentd install`).
If editing the text cannot give exactly the intended values, the values win: the file is written
without the comments and the caller is told."""

from __future__ import annotations

import copy
import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import tomli_w

from agentd import frozen_value
from agentd.install.ports import LOOPBACK
from agentd.install.sockets import SERVICES
from agentd.resources import example_config

TABLE_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\[\]#]+?)\s*\]\]?\s*(#.*)?$")
STRING_KEY = re.compile(
    r"""^(?P<lead>\s*(?P<key>[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')\s*=\s*)"""
    r"""(?P<value>"(?:[^"\\]|\\.)*"|'[^']*')(?P<gap>\s*)(?P<comment>#.*)?$"""
)


@frozen_value
class Placement:
    """Where install puts the agent, as its TOML names it."""

    agent: str
    state_dir: str
    workspace: str
    run_dir: str
    run_as: str
    sensors_run_as: str


def agent_toml(placement: Placement, ports: list[int]) -> tuple[str, str | None]:
    """(the TOML's text, a warning if it had to be written without the example's comments)."""
    example = example_config().read_text(encoding="utf-8")
    original = tomllib.loads(example)
    intended = intended_config(copy.deepcopy(original), placement, ports)
    header = _config_header(placement.agent, ports)
    text = header + _without_header(_edit_strings(example, _string_edits(original, intended)))
    if "sensors" not in original:  # the example leaves [sensors] to its defaults: add the sensors' user
        text += _sensors_table(intended["sensors"]["run_as"])
    if "web" not in original and "web" in intended:  # the example leaves [web] to its defaults: add the port
        text += _web_table(intended["web"]["listen"])
    try:
        if tomllib.loads(text) == intended:
            return text, None
    except tomllib.TOMLDecodeError:
        pass
    return header + "\n" + tomli_w.dumps(intended), "written without the example's comments (editing them in failed)"


def intended_config(raw: dict[str, Any], placement: Placement, ports: list[int]) -> dict[str, Any]:
    agent = placement.agent
    raw["agent"].update(agent_id=agent, internal_name=agent, display_name=agent.capitalize())
    # Relative paths resolve against /etc/agentd, the file's own folder (so --root works too).
    raw["constitution"].update(soul_path=f"{agent}/SOUL.md", purpose_path=f"{agent}/PURPOSE.md")
    raw["paths"] = {
        "state_dir": placement.state_dir,
        "workspace": placement.workspace,
        "skills_dir": f"{agent}/skills",
        "sensors_dir": f"{agent}/sensors",
        "run_dir": placement.run_dir,
    }
    raw.setdefault("dispatch", {})["run_as"] = placement.run_as
    raw.setdefault("sensors", {})["run_as"] = placement.sensors_run_as
    raw["payload_schemas"] = {key: f"{agent}/{value}" for key, value in raw.get("payload_schemas", {}).items()}
    for adapter in raw.get("adapters", []):
        if adapter.get("kind") == "script" and not Path(adapter["command"]).is_absolute():
            adapter["command"] = f"{agent}/{adapter['command']}"
    dispatch, sensors = ports[:2]
    raw.setdefault("metrics", {}).update(
        dispatch_listen=f"{LOOPBACK}:{dispatch}", sensors_listen=f"{LOOPBACK}:{sensors}"
    )
    if len(ports) > 2:  # the console's own port (docs/web.md, "Its port")
        raw.setdefault("web", {})["listen"] = f"{LOOPBACK}:{ports[2]}"
    return raw


def _sensors_table(run_as: str) -> str:
    return (
        "\n# Sensors run as a user of their own, each with its folder in that user's home, out of every\n"
        '# attempt\'s reach (docs/install-and-deploy.md, "The boundary").\n[sensors]\n'
        + tomli_w.dumps({"run_as": run_as})
    )


def _web_table(listen: str) -> str:
    return (
        "\n# `agentd web`, the console and HTTP API (docs/web.md): its own port, free and named by no other agent\n"
        "# here when install ran (9578 up).\n[web]\n" + tomli_w.dumps({"listen": listen})
    )


def _config_header(agent: str, ports: list[int]) -> str:
    return (
        f"# The identity of agent {agent!r}, written by `agentd install` from agentd's example.\n"
        f"# Edit it, then `agentd config check --agent {agent}` and\n"
        f"# `systemctl restart {' '.join(f'agentd-{service}@{agent}' for service in SERVICES)}`.\n"
        "# Relative paths resolve against this file's folder (/etc/agentd).\n"
        f"# Its metrics ports {ports[0]}/{ports[1]} were free and named by no other agent here when install ran\n"
        "# (pairs from 9478/9479 up), and so was its console port ([web] listen, from 9578 up);\n"
        "# `agentd config check` refuses a port another agent's TOML names.\n"
        f"# Attempts run as {agent}'s run user ([dispatch] run_as), sensors as its sensor user ([sensors] run_as),\n"
        "# never as the services' user.\n"
    )


def _without_header(text: str) -> str:
    """The example minus its opening comment block, which describes the example, not this agent."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "".join(lines[start:])


def _string_edits(old: dict[str, Any], new: dict[str, Any]) -> dict[tuple[str, int], dict[str, str]]:
    """(table, nth occurrence) -> {key: new string} for each string of a top-level table, or of the nth
    [[table]], that differs between the example and what this agent's file should say."""
    edits = {}
    for name, value in new.items():
        before = old.get(name)
        tables, were = (value, before) if isinstance(value, list) and isinstance(before, list) else ([value], [before])
        for index, (table, was) in enumerate(zip(tables, were, strict=False)):  # extra ones: no edit, values differ
            if isinstance(table, dict) and isinstance(was, dict):
                changed = {k: v for k, v in table.items() if isinstance(v, str) and was.get(k) != v}
                if changed:
                    edits[(name, index)] = changed
    return edits


def _edit_strings(text: str, edits: dict[tuple[str, int], dict[str, str]]) -> str:
    """Replace the named `key = "string"` lines in place, keeping their comments; a key the table does
    not have yet is added after its last line. Anything else it cannot do (a value on several lines)
    stays as it was: the caller compares values."""
    lines: list[str] = []
    seen, table, pending = Counter[str](), ("", 0), dict(edits.get(("", 0), {}))
    last_key = -1  # the index in `lines` after which the current table's missing keys go
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        if header := TABLE_HEADER.match(body):
            _insert_missing(lines, last_key, pending)
            table = (header["name"], seen[header["name"]])
            seen[header["name"]] += 1
            pending, last_key = dict(edits.get(table, {})), len(lines)
        elif (found := STRING_KEY.match(body)) and (new := pending.pop(_key_name(found["key"]), None)) is not None:
            line = _with_value(found, new) + line[len(body) :]
        lines.append(line)
        if body.strip() and not body.lstrip().startswith("#") and not TABLE_HEADER.match(body):
            last_key = len(lines) - 1
    _insert_missing(lines, last_key, pending)
    return "".join(lines)


def _insert_missing(lines: list[str], after: int, pending: dict[str, str]) -> None:
    if pending and after >= 0:
        added = [tomli_w.dumps({key: value}) for key, value in pending.items()]
        lines[after + 1 : after + 1] = added


def _key_name(key: str) -> str:
    return next(iter(tomllib.loads(f"{key} = 0")))  # TOML's own unquoting


def _with_value(found: re.Match[str], new: str) -> str:
    value = tomli_w.dumps({"v": new}).removeprefix("v = ").rstrip("\n")
    if not found["comment"]:
        return found["lead"] + value
    width = len(found["value"]) + len(found["gap"])  # the comment keeps its column where the value allows
    return found["lead"] + value.ljust(width - 1) + " " + found["comment"]
