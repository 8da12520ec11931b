"""Sending one external message through its handler, once per call: a webhook POST, a spool line, a
command. Each returns what the attempt came to (agentd.records.messages.Sent) and never raises for
what the receiver does; whether and when to try again is agentd/control/delivery.py's decision.

Every send carries the outbox row's idempotency key (the Idempotency-Key header, the spool line's
`idempotency_key`, $AGENTD_IDEMPOTENCY_KEY): a receiver that sees a key again has the message already.
Secrets (a webhook's env_file, a command's) never reach an error text: `send` redacts everything a
handler returns, on every path, before anything records or logs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import re
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from agentd import __version__
from agentd.config.environment import read_env_file
from agentd.control.spool import Failed, append_line, doing, spool_line
from agentd.edge import printable
from agentd.errors import ConfigError
from agentd.process.environment import child_environment
from agentd.process.files import remove_tree
from agentd.process.http import client
from agentd.process.runner import ProcessSpec, run_process
from agentd.records.messages import (
    SECRET_REF,
    CommandHandler,
    Delivery,
    Sent,
    SpoolHandler,
    WebhookHandler,
)
from agentd.redaction import Redactor

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)
# The HTTP library logs what a receiver answered, unredacted (the reason phrase at INFO, raw bytes at
# DEBUG). agentd reports answers itself, redacted (`send`): the library keeps to its warnings.
logging.getLogger("httpx").setLevel(logging.WARNING)
logging.getLogger("httpcore").setLevel(logging.WARNING)

BODY_CAP_BYTES = 4 * 1024  # of a webhook's answer, read only when it is not 2xx (docs/messages.md)
BODY_SHOWN_CHARS = 200  # of those, in its error
ERROR_CHARS = 300  # of a command's stderr, in its last_error
MAX_ERROR_CHARS = 500  # any error text a send returns, once redacted
OUTPUT_CAP_BYTES = 64 * 1024  # a command handler's stdout/stderr, each
RETRY_STATUSES = (408, 429)  # 4xx that mean "later", not "never"
# Retry-After as RFC 9110 §10.2.3 allows it: delay-seconds (ASCII digits only) or an HTTP-date in one of
# its three forms (IMF-fixdate, RFC 850, asctime). Anything else leaves the handler's own backoff.
DELAY_SECONDS = re.compile(r"[0-9]+", re.ASCII)
HTTP_DATES = (
    re.compile(r"[A-Z][a-z]{2}, [0-9]{2} [A-Z][a-z]{2} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT", re.ASCII),
    re.compile(r"[A-Z][a-z]{5,8}, [0-9]{2}-[A-Z][a-z]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT", re.ASCII),
    re.compile(r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ 0-9][0-9] [0-9]{2}:[0-9]{2}:[0-9]{2} [0-9]{4}", re.ASCII),
)
QUOTED_BYTES = re.compile(r":?\s*(?:bytearray\()?b['\"]")
LONGEST_DELAY_S = 10**9  # more digits than this ask for "very long": backoff_max_s bounds it anyway

MessageHandler = WebhookHandler | SpoolHandler | CommandHandler


async def send(handler: MessageHandler, delivery: Delivery, work_dir: Path, kill_grace_s: float) -> Sent:
    """One attempt at delivering `delivery` through `handler`; `work_dir` holds a command's scratch files.
    Never raises: what fails inside agentd is a retry that says so. Whatever it returns, on every path,
    passes `cleaned` here: the one place a receiver's or a command's words (and exception texts) are
    redacted by the handler's env_file values, made printable and bounded, before anything records
    (events, `outbox list`) or logs them."""
    try:
        secrets = _secrets(handler)
    except Failed as exc:
        return cleaned(Sent("retry", str(exc)), Redactor())
    redactor = Redactor(secrets.values())
    try:
        sent = await _send(handler, delivery, secrets, redactor, work_dir, kill_grace_s)
    except Exception as exc:  # the handler's boundary: a bug in here is this attempt's retry, never the loop's
        told = redactor.text("".join(traceback.format_exception(exc)))
        logger.error("message_handler_failed key=%s handler=%s: %s", delivery.idempotency_key, handler.handler_id, told)
        sent = Sent("retry", f"internal_error: {type(exc).__name__}: {exc}")
    return cleaned(sent, redactor)


def _secrets(handler: MessageHandler) -> dict[str, str]:
    """The handler's env_file, read for this attempt: its values are what `send` redacts."""
    env_file = None if isinstance(handler, SpoolHandler) else handler.env_file
    if not env_file:
        return {}
    with doing("read env_file", Path(env_file)):
        try:
            return read_env_file(Path(env_file))
        except ConfigError as exc:  # it names the file, and the line or why (not UTF-8, too large)
            raise Failed(f"cannot read env_file {exc}") from exc


async def _send(
    handler: MessageHandler,
    delivery: Delivery,
    secrets: dict[str, str],
    redactor: Redactor,
    work_dir: Path,
    kill_grace_s: float,
) -> Sent:
    if isinstance(handler, WebhookHandler):
        return await post_webhook(handler, delivery, secrets, redactor)
    if isinstance(handler, SpoolHandler):
        line = spool_line(delivery)
        resent = delivery.attempts > 1  # an earlier attempt may have written it before it was interrupted
        return await anyio.to_thread.run_sync(append_line, Path(handler.path), line, resent)
    return await run_command(handler, delivery, secrets, redactor, work_dir, kill_grace_s)


def cleaned(sent: Sent, redactor: Redactor) -> Sent:
    """`sent` with its texts redacted, made printable, then bounded, in that order: cut first, a secret
    cut in two would no longer be recognised. Redacted once more at the end, since an escape or the
    cut can spell a secret out of text that held it apart."""
    return replace(sent, error=_clean(sent.error, redactor), note=_clean(sent.note, redactor))


def _clean(text: str | None, redactor: Redactor) -> str | None:
    if text is None:
        return None
    shown = _visible(printable(redactor.text(text)))
    if len(shown) > MAX_ERROR_CHARS:
        half = MAX_ERROR_CHARS // 2  # both ends: what failed, and the last words said about it
        shown = f"{shown[:half]}…{shown[-half:]}"
    return redactor.text(shown)


def _visible(text: str) -> str:
    """Every character a terminal would not show as itself (bidi overrides, zero-width and other format
    characters, line separators: they reorder or hide what `outbox list` prints) as its \\u escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def _escaped(char: str) -> str:
    return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"


# --- a signed hand-off (docs/web.md, "Approval hand-off") ---------------------------------------------

TIMESTAMP_HEADER = "X-Agentd-Timestamp"  # UNIX seconds when it was signed
SIGNATURE_HEADER = "X-Agentd-Signature"  # sha256=<hex HMAC-SHA256 over "<timestamp>.<body>">


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """What SIGNATURE_HEADER carries: a receiver recomputes it with the same secret and compares in
    constant time, and refuses a timestamp too old (a replay)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


async def send_signed(handler: WebhookHandler, delivery: Delivery, secret_key: str, timestamp: str) -> Sent:
    """One signed POST through a webhook handler: the secret is `secret_key`'s value in its env_file
    (redacted, as every value of it, from whatever the send returns). No such key: a retry that says so."""
    try:
        secrets = _secrets(handler)
    except Failed as exc:
        return cleaned(Sent("retry", str(exc)), Redactor())
    redactor = Redactor(secrets.values())
    if not secrets.get(secret_key):
        return cleaned(Sent("retry", f"env_file {handler.env_file} has no {secret_key}=… to sign with"), redactor)

    def signer(body: bytes) -> list[tuple[bytes, bytes]]:
        signed = signature(secrets[secret_key], timestamp, body)
        return [(TIMESTAMP_HEADER.encode(), timestamp.encode()), (SIGNATURE_HEADER.encode(), signed.encode())]

    try:
        sent = await post_webhook(handler, delivery, secrets, redactor, signer)
    except Exception as exc:  # as `send`: a bug in here is this attempt's retry, never the caller's
        logger.error("approval hand-off failed: %s", redactor.text("".join(traceback.format_exception(exc))))
        sent = Sent("retry", f"internal_error: {type(exc).__name__}: {exc}")
    return cleaned(sent, redactor)


# --- webhook ---------------------------------------------------------------------------------------


async def post_webhook(
    handler: WebhookHandler,
    delivery: Delivery,
    secrets: dict[str, str],
    redactor: Redactor,
    signer: Callable[[bytes], list[tuple[bytes, bytes]]] | None = None,
) -> Sent:
    """POST the message as JSON; 2xx delivered it, a 4xx other than 408/429 refused it for good,
    anything else (5xx, 408, 429, a timeout, no connection) is worth another try. `signer` adds the
    headers that sign the exact body bytes (an approval hand-off: `send_signed`)."""
    import httpx  # only a process that sends loads it (agentd/process/http.py)

    try:  # as UTF-8 bytes: a token need not be ASCII
        headers = [(name.encode(), _expand(value, secrets).encode()) for name, value in handler.headers.items()]
    except KeyError as exc:
        return Sent("retry", f"the headers' env_file: {exc.args[0]}")
    headers += [
        (b"Content-Type", b"application/json"),
        (b"Idempotency-Key", delivery.idempotency_key.encode()),
        (b"User-Agent", f"agentd/{__version__}".encode()),
        (b"Accept-Encoding", b"identity"),  # the few bytes read of an answer are its words, not compressed
    ]
    body = json.dumps(delivery.message, ensure_ascii=False, allow_nan=False).encode()
    headers += signer(body) if signer is not None else []
    try:
        response, first = await _exchange(handler, headers, body, redactor)
    except TimeoutError:
        return Sent("retry", f"no answer within {handler.timeout_s:g}s")
    except httpx.HTTPError as exc:
        return Sent("retry", f"{type(exc).__name__}: {_own_words(exc)}")
    reason = redactor.raw(response.extensions.get("reason_phrase", b"")).decode("utf-8", "replace")
    return http_answer(response.status_code, reason, response.headers.get_list("retry-after"), first)


async def _exchange(
    handler: WebhookHandler, headers: list[tuple[bytes, bytes]], body: bytes, redactor: Redactor
) -> tuple[httpx.Response, str]:
    """The answer's status line and headers, and the first words of its body (none for a 2xx): never
    more than BODY_CAP_BYTES of it are read, whatever it sends or however long it takes, and all of it
    within timeout_s, however slowly the receiver drips. The rest is never read: the connection closes."""
    started = anyio.current_time()
    async with client(handler.timeout_s) as http:
        request = http.build_request("POST", handler.url, content=body, headers=headers)
        with anyio.fail_after(handler.timeout_s):
            response = await http.send(request, stream=True)
        try:
            first = ""
            if not 200 <= response.status_code < 300:  # delivered by its status line: no need to listen
                with anyio.move_on_after(max(started + handler.timeout_s - anyio.current_time(), 0)):
                    first = await _first_words(response, redactor)
        finally:
            await response.aclose()
    return response, first


async def _first_words(response: httpx.Response, redactor: Redactor) -> str:
    """At most BODY_CAP_BYTES of the body, streamed (never buffered whole); an answer cut short or reset
    gives what came. Redacted before it is cut to BODY_SHOWN_CHARS (and what came last before the cap is
    dropped: a secret the cap cut in two would no longer be recognised)."""
    import httpx

    data = bytearray()
    with contextlib.suppress(httpx.HTTPError):
        async for chunk in response.aiter_raw():
            data += chunk[: BODY_CAP_BYTES - len(data)]
            if len(data) >= BODY_CAP_BYTES:
                del data[max(len(data) - redactor.reach, 0) :]
                break
    text = redactor.text(redactor.raw(bytes(data)).decode("utf-8", "replace"))
    return " ".join(text.split())[:BODY_SHOWN_CHARS]


def _own_words(exc: httpx.HTTPError) -> str:
    """The HTTP library's message up to where it quotes what the receiver sent (`illegal status line:
    bytearray(b'...')`): a receiver's bytes reach an error only through the reason phrase and the first
    words, which are redacted as bytes first; quoted, they would be escaped once more than redaction sees."""
    return QUOTED_BYTES.split(str(exc), maxsplit=1)[0] or type(exc).__name__


def http_answer(status: int, reason: str, retry_after: Sequence[str] = (), first_words: str = "") -> Sent:
    """What the receiver's status code means for the message; `retry_after` is the Retry-After field's
    lines (a receiver may send none, one, or several), `first_words` the start of its body."""
    said = f"HTTP {status} {reason}".strip()
    told = f" (it said: {first_words})" if first_words else ""
    if 200 <= status < 300:
        return Sent("delivered")
    if 400 <= status < 500 and status not in RETRY_STATUSES:
        return Sent("rejected", f"{said}: the receiver refused it; it is not sent again{told}")
    delay_s, at = parse_retry_after(retry_after)
    return Sent("retry", said + told, retry_after_s=delay_s, retry_at=at)


def parse_retry_after(lines: Sequence[str]) -> tuple[float | None, datetime | None]:
    """(seconds, None) or (None, a moment) for a Retry-After RFC 9110 allows; (None, None) for anything
    else: no field, several values, a sign, a fraction, non-ASCII digits, another date form, a day that
    does not exist. Never raises: whatever a receiver sends, the handler's backoff still applies."""
    if len(lines) != 1:
        return None, None
    value = lines[0].strip(" \t")
    if DELAY_SECONDS.fullmatch(value):
        digits = value.lstrip("0") or "0"
        return float(int(digits) if len(digits) <= 9 else LONGEST_DELAY_S), None
    if not any(form.fullmatch(value) for form in HTTP_DATES):
        return None, None
    try:
        moment = parsedate_to_datetime(value)
    except (ValueError, TypeError, OverflowError):
        return None, None
    return None, moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)  # asctime is GMT too


def _expand(value: str, secrets: dict[str, str]) -> str:
    def secret(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in secrets:
            raise KeyError(f"it has no {name}")
        return secrets[name]

    return SECRET_REF.sub(secret, value)


# --- command ---------------------------------------------------------------------------------------


async def run_command(
    handler: CommandHandler,
    delivery: Delivery,
    secrets: dict[str, str],
    redactor: Redactor,
    work_dir: Path,
    kill_grace_s: float,
) -> Sent:
    """Run argv with the message JSON on stdin, in its own process group with a hard timeout; the
    environment is only what the handler configures (env_file, env) and agentd's AGENTD_* variables."""
    try:
        with doing("create a scratch folder in", work_dir):
            scratch = _scratch_dir(work_dir, delivery)
    except Failed as exc:
        return Sent("retry", str(exc))
    # the env_file's values as `send` read them (and redacts by), then env over them, as for an adapter
    env, _ = child_environment(
        home=work_dir, tmp=scratch, agentd=_agentd_env(delivery), env={**secrets, **(handler.env or {})}
    )
    try:
        result = await run_process(
            ProcessSpec(
                argv=handler.argv,
                cwd=scratch,
                env=env,
                stdout_path=scratch / "stdout",
                stderr_path=scratch / "stderr",
                timeout_s=handler.timeout_s,
                kill_grace_s=kill_grace_s,
                output_cap_bytes=OUTPUT_CAP_BYTES,
                stdin=json.dumps(delivery.message, ensure_ascii=False, allow_nan=False).encode(),
            )
        )
        said = _tail(scratch / "stderr", redactor)
    finally:
        remove_tree(scratch)  # whatever the command left there, however deep
    if result.ok:
        return Sent("delivered")
    return Sent("retry", result.describe() + (f": {said}" if said else ""))


def _scratch_dir(work_dir: Path, delivery: Delivery) -> Path:
    """A fresh folder for one run (its cwd, TMPDIR and output files), removed after it."""
    work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{delivery.outbox_id}-", dir=work_dir))


def _agentd_env(delivery: Delivery) -> dict[str, str]:
    return {
        "AGENTD_IDEMPOTENCY_KEY": delivery.idempotency_key,
        "AGENTD_OUTBOX_ID": str(delivery.outbox_id),
        "AGENTD_TASK_ID": str(delivery.task_id),
        "AGENTD_MESSAGE_HANDLER": delivery.handler_id,
        "AGENTD_DELIVERY_ATTEMPT": str(delivery.attempts),
    }


def _tail(path: Path, redactor: Redactor) -> str:
    """The last ERROR_CHARS bytes, of the file redacted whole first: a secret across the cut is found."""
    try:
        redactor.file(path)
        data = path.read_bytes()[-ERROR_CHARS:]
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace").strip()
