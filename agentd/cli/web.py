"""`agentd web` (the HTTP API and console as a service) and `agentd web token add|list|revoke`, the
operators' bearer tokens (docs/web.md)."""

from __future__ import annotations

import argparse
import functools
import logging
import re
import sys
from typing import Any

from agentd.cli.common import add_command, agent_store, config_from, print_json, print_table, store_from, wants_json
from agentd.clock import SystemClock
from agentd.edge import quoted
from agentd.errors import InputError

TOKEN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def register(commands: Any) -> None:
    web = add_command(
        commands,
        "web",
        cmd_web,
        "serve the HTTP API and the operator console until SIGTERM (docs/web.md); `web token` makes logins",
    )
    web.add_argument("--listen", metavar="HOST:PORT", help="instead of [web] listen (port 0: any free port)")
    web.set_defaults(log_level=logging.INFO, service=True)
    actions = web.add_subparsers(dest="web_command", metavar="ACTION")
    tokens = actions.add_parser("token", help="the operators' bearer tokens").add_subparsers(
        dest="token_command", metavar="ACTION", required=True
    )
    add = add_command(tokens, "add", cmd_token_add, "issue NAME a token: printed once, only its hash is kept")
    add.add_argument("name", metavar="NAME", help="the operator's name, recorded as `by` in every event")
    add.add_argument("--replace", action="store_true", help="revoke NAME's live token and issue a new one")
    add_command(tokens, "list", cmd_token_list, "every token issued: name, id, when, by whom, revoked")
    revoke = add_command(tokens, "revoke", cmd_token_revoke, "revoke NAME's token: its requests and sessions end")
    revoke.add_argument("name", metavar="NAME", help="the operator whose token to revoke")
    for quick in (add, revoke, tokens.choices["list"]):
        quick.set_defaults(log_level=logging.WARNING, service=False)  # not the service's


def token_name(text: str) -> str:
    """An operator's name as a token takes it; InputError naming NAME otherwise."""
    if not TOKEN_NAME.fullmatch(text):
        raise InputError(f"NAME: expected 1-64 letters, digits, '.', '_' or '-' (not first), found {quoted(text)}")
    return text


def cmd_token_add(args: argparse.Namespace) -> int:
    """`agentd web token add NAME [--replace]`: the token is printed once, only its hash kept."""
    from agentd import control
    from agentd.web.auth import new_token

    name = token_name(args.name)
    token_id, hashed, whole = new_token()
    with agent_store(args) as (config, store):
        store.add_web_token(token_id, name, hashed, control.operator(), SystemClock().now(), replace=args.replace)
    if wants_json(args):
        print_json({"name": name, "token_id": token_id, "token": whole, "url": f"http://{config.web.listen}/"})
    else:
        print(whole)
        print(f"agentd: the token of {name!r} (shown once; only its hash is kept)", file=sys.stderr)
    return 0


def cmd_token_list(args: argparse.Namespace) -> int:
    """`agentd web token list`: names, ids, who issued them, revoked or not."""
    with agent_store(args, readonly=True) as (_, store):
        tokens = store.web_tokens()
    if wants_json(args):
        print_json([t.as_dict() for t in tokens])
        return 0
    rows = [
        (t.name, t.token_id, t.as_dict()["created_at"], t.created_by, t.as_dict()["revoked_at"] or "-") for t in tokens
    ]
    print_table(("NAME", "TOKEN_ID", "CREATED", "BY", "REVOKED"), rows)
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    """`agentd web token revoke NAME`."""
    from agentd import control

    with agent_store(args) as (_, store):
        token = store.revoke_web_token(token_name(args.name), control.operator(), SystemClock().now())
    print_json(token.as_dict()) if wants_json(args) else print(
        f"revoked the token of {token.name!r} ({token.token_id})"
    )
    return 0


def cmd_web(args: argparse.Namespace) -> int:
    """The service: its own connection, until SIGTERM/SIGINT."""
    import anyio

    from agentd.install.neighbours import neighbour_run_users
    from agentd.services.shell import run_services
    from agentd.store import AsyncStore
    from agentd.web.service import WebService

    config = config_from(args)
    db = AsyncStore(store_from(config))
    try:
        others = functools.partial(neighbour_run_users, config)
        anyio.run(run_services, WebService(config, db, clock=SystemClock(), listen=args.listen, run_users=others))
    finally:
        db.close()
    return 0
