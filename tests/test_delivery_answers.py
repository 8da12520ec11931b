"""What a webhook's receiver answers can never hurt the agent (issue 23): any Retry-After, a secret
echoed in any part of an answer, a huge, endless or trickling body, HTTP/0.9 garbage, a reset. Real
HTTP on 127.0.0.1 (tests/hostile_http.py), the real delivery loop, a migrated SQLite file."""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from hostile_http import Answer, HostileReceiver, answer
from hypothesis import given, settings
from hypothesis import strategies as st
from rig import Rig
from support import CliResult, examples
from test_delivery import Mutate, complete_with_messages, webhook, with_handlers

from agentd.clock import FakeClock
from agentd.control.delivery import backoff_s
from agentd.control.handlers import BODY_CAP_BYTES, MAX_ERROR_CHARS, cleaned, http_answer
from agentd.records.messages import OutboxItem, Sent, WebhookHandler
from agentd.redaction import MARK, Redactor


@pytest.fixture
def hostile() -> Iterator[Callable[..., HostileReceiver]]:
    made: list[HostileReceiver] = []

    def make(script: Callable[[int], Answer] | Answer) -> HostileReceiver:
        made.append(HostileReceiver(script))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


async def deliver_once(rig: Rig, **fields: Any) -> OutboxItem:
    """One message, one attempt through the rig's webhook handler: the outbox row it left."""
    await complete_with_messages(rig, {"text": "hello"})
    assert await rig.dispatcher().outbox.deliveries.deliver_due(rig.clock.now()) == 1
    [item] = rig.store.list_outbox()
    return item


# --- Retry-After of any form (finding 9b) -----------------------------------------------------------

RETRY_AFTER = [  # (the field's lines as sent, the wait it leads to with base 60 s and max 600 s)
    ([b"120"], 120),
    ([b" 120 "], 120),
    ([b"\xc2\xb2"], 60),  # superscript two: str.isdigit() says yes, float() says no
    ([b"\xb2"], 60),
    (["١٢٠".encode()], 60),  # Arabic-Indic digits: float() reads them; RFC 9110 allows only ASCII DIGIT
    ([b"-5"], 60),
    ([b"1e3"], 60),
    ([b"0"], 60),
    ([b"9" * 30], 600),
    ([b"9" * 5000], 600),  # more digits than int() converts
    ([b"120, 60"], 60),  # one field line, two values
    ([b"120", b"60"], 60),  # two field lines
    ([b"Sun, 22 Nov 2026 10:05:00 GMT"], 300),  # IMF-fixdate, five minutes after the rig's clock
    ([b"Sunday, 22-Nov-26 10:05:00 GMT"], 300),  # RFC 850
    ([b"Sun Nov 22 10:05:00 2026"], 300),  # asctime
    ([b"Sun, 06 Nov 1994 08:49:37 GMT"], 60),  # in the past
    ([b"Fri, 31 Dec 9999 23:59:59 GMT"], 600),
    ([b"Sun, 31 Feb 2026 10:05:00 GMT"], 60),  # no such day
    ([b"Sun, 22 Nov 99999 10:05:00 GMT"], 60),
    ([b"soon"], 60),
    ([b""], 60),
]


@pytest.mark.asyncio
@pytest.mark.parametrize(("lines", "wait_s"), RETRY_AFTER, ids=[repr(v)[:40] for v, _ in RETRY_AFTER])
async def test_a_retry_after_of_any_form_is_a_retry_within_the_handlers_backoff_never_an_internal_error(
    rig_factory: Callable[..., Rig],
    hostile: Callable[..., HostileReceiver],
    lines: list[bytes],
    wait_s: float,
) -> None:
    receiver = hostile(answer(503, b"Service Unavailable", [(b"Retry-After", line) for line in lines]))
    rig = rig_factory(with_handlers(webhook(receiver.url, backoff_base_s=60, backoff_max_s=600), default="hook"))
    item = await deliver_once(rig)
    assert (item.state, item.last_error) == ("pending", "HTTP 503 Service Unavailable")
    assert item.next_attempt_at == rig.clock.now() + timedelta(seconds=wait_s)


def format_datetime_gmt(moment: datetime) -> str:
    return format_datetime(moment, usegmt=True)


@settings(max_examples=examples(400), deadline=None)
@given(
    lines=st.lists(
        st.one_of(
            st.text(),
            st.from_regex(r"\A[ \t]*[0-9]{1,40}[ \t]*\Z"),
            st.datetimes(timezones=st.just(UTC)).map(format_datetime_gmt),
        ),
        max_size=3,
    ),
    attempt=st.integers(1, 200),
)
def test_any_retry_after_leads_to_a_wait_within_the_handlers_bounds(lines: list[str], attempt: int) -> None:
    handler = WebhookHandler(
        handler_id="h", kind="webhook", url="https://x.test/", backoff_base_s=7, backoff_max_s=900, max_attempts=100
    )
    now = FakeClock().now()
    sent = http_answer(503, "Service Unavailable", lines)
    own = backoff_s(handler, attempt, Sent("retry"), now)
    wait = backoff_s(handler, attempt, sent, now)
    assert math.isfinite(wait) and own <= wait <= handler.backoff_max_s


# --- a secret echoed in any part of an answer (finding 3) --------------------------------------------

SECRET = 'wh-Sëcret"with\\quote-0123456789'  # JSON and Python escape the quote and the backslash; ë is not ASCII


def secret_forms(secret: str) -> list[str]:
    """Every form a secret can take in a text agentd writes: as is, JSON-escaped, inside a Python repr of
    the text or of its bytes (exception messages quote what they received)."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]}
    for encoding in ("utf-8", "latin-1"):
        forms.add(repr(secret.encode(encoding))[2:-1])
        forms.add(repr(bytearray(secret.encode(encoding)))[12:-2])
    return sorted(forms)


def secret_runs(secret: str) -> list[str]:
    """Its forms and its distinctive runs: a secret cut in two leaks all the same."""
    return [*secret_forms(secret), secret[:12], secret[-12:], secret.encode().decode("ascii", "ignore")[-14:]]


def hooked(url: str, env_file: Path, **fields: Any) -> Mutate:
    """The rig's webhook handler, sending the secret in a header (as a real one sends its token)."""
    return with_handlers(
        webhook(url, headers={"Authorization": "Bearer ${TOKEN}"}, env_file=str(env_file), **fields), default="hook"
    )


def env_file_with(tmp_path: Path, secret: str) -> Path:
    path = tmp_path / "hook.env"
    path.write_text(f"TOKEN={secret}\n")
    path.chmod(0o600)
    return path


def leaks(rig: Rig, secret: str, *texts: str) -> list[str]:
    """Where any form of `secret` is found: the events, the outbox, the database files, `texts`."""
    places = {
        "events": json.dumps([e.payload for e in rig.events()], ensure_ascii=False),
        "outbox": json.dumps([i.as_dict() for i in rig.store.list_outbox()], ensure_ascii=False),
        **{f"text {n}": text for n, text in enumerate(texts)},
    }
    for path in rig.config.paths.state_dir.rglob("*"):
        if path.is_file():
            places[str(path)] = path.read_bytes().decode("latin-1")  # every byte kept, whatever it is
    forms = secret_runs(secret)
    forms += [f.encode().decode("latin-1") for f in forms]  # as the files hold them
    return [f"{place}: {form!r}" for place, text in places.items() for form in forms if form in text]


U = SECRET.encode()
ECHOES = {  # the secret (sent in the Authorization header) echoed back in every part of an answer
    "reason-phrase": (answer(500, b"Oops " + U), "pending"),
    "reason-phrase-latin-1": (answer(503, SECRET.encode("latin-1")), "pending"),
    "reason-phrase-of-a-refusal": (answer(403, b"Forbidden " + U), "failed"),
    "reason-phrase-with-controls": (answer(500, b"\x1b[2J" + U + b"\x7f"), "pending"),
    "body": (
        answer(500, b"Oops", body=b'{"error": ' + json.dumps(SECRET).encode() + b', "raw": "' + U + b'"}'),
        "pending",
    ),
    "body-after-4-KiB": (answer(500, b"Oops", body=b"y" * 4090 + U), "pending"),
    "body-after-4-KiB-of-spaces": (answer(500, b"Oops", body=b" " * 4090 + U), "pending"),
    "headers": (answer(503, b"Busy", [(b"X-Echo", U), (b"Retry-After", U), (b"Set-Cookie", U)]), "pending"),
    "status-line": (Answer(head=b"HTTP/1.1 5" + U + b"\r\n\r\n"), "pending"),
    "http-0.9": (Answer(head=U + b"\r\n" + U + b"\r\n\r\n"), "pending"),
    "reset-mid-body": (answer(502, U, body=U, filler=1 << 20, reset=True), "pending"),
}


@pytest.mark.asyncio
@pytest.mark.parametrize(("echo", "state"), ECHOES.values(), ids=ECHOES.keys())
async def test_a_secret_the_receiver_echoes_in_any_part_of_its_answer_is_recorded_nowhere(
    rig_factory: Callable[..., Rig],
    hostile: Callable[..., HostileReceiver],
    tmp_path: Path,
    rig_cli: Callable[..., CliResult],
    caplog: pytest.LogCaptureFixture,
    echo: Answer,
    state: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    receiver = hostile(echo)
    rig = rig_factory(hooked(receiver.url, env_file_with(tmp_path, SECRET)))
    item = await deliver_once(rig)
    assert U in receiver.heads[0], "the receiver had the secret to echo"
    assert item.state == state
    listed = rig_cli(rig, "outbox", "list")
    assert listed.code == 0
    assert leaks(rig, SECRET, listed.out, caplog.text) == []


@pytest.mark.asyncio
async def test_a_secret_quoted_in_an_exception_message_is_recorded_nowhere(
    rig_factory: Callable[..., Rig],
    hostile: Callable[..., HostileReceiver],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A header value HTTP cannot carry (a NUL in the token): the HTTP library refuses it, quoting the
    value in its message; the error keeps the message up to the quote (redaction would see it too)."""
    caplog.set_level(logging.DEBUG)
    secret = "ctl-Sëcret\x00-0123456789"
    receiver = hostile(answer())
    rig = rig_factory(hooked(receiver.url, env_file_with(tmp_path, secret)))
    item = await deliver_once(rig)
    assert (item.state, item.last_error) == ("pending", "LocalProtocolError: Illegal header value")
    assert leaks(rig, secret, caplog.text) == []


@pytest.mark.process
@pytest.mark.asyncio
@pytest.mark.parametrize("before", [0, 290, 10_000])
async def test_a_secret_in_a_commands_stderr_is_recorded_nowhere_wherever_the_tail_cuts_it(
    rig_factory: Callable[..., Rig], tmp_path: Path, caplog: pytest.LogCaptureFixture, before: int
) -> None:
    """The last 300 bytes of stderr become the error: cut there first, a secret that straddles the cut
    was no longer recognised."""
    caplog.set_level(logging.DEBUG)
    script = tmp_path / "fail.py"
    script.write_text(f"import sys\nsys.stderr.write('x' * {before} + sys.argv[1] + ' then ' + 'y' * 270)\nsys.exit(3)")
    command = {
        "handler_id": "cmd",
        "kind": "command",
        "argv": [sys.executable, str(script), SECRET],
        "env_file": str(env_file_with(tmp_path, SECRET)),
    }
    rig = rig_factory(with_handlers(command, default="cmd"))
    await complete_with_messages(rig, {"text": "hello"})
    assert await rig.dispatcher().outbox.deliveries.deliver_due(rig.clock.now()) == 1
    [item] = rig.store.list_outbox()
    assert item.state == "pending" and (item.last_error or "").startswith("exit 3: ")
    assert leaks(rig, SECRET, caplog.text) == []


@settings(max_examples=examples(300), deadline=None)
@given(
    before=st.text(max_size=600),
    form=st.sampled_from([*secret_forms(SECRET), SECRET.encode().decode("latin-1")]),
    after=st.text(max_size=600),
)
def test_whatever_a_handler_returns_is_redacted_printable_and_bounded(before: str, form: str, after: str) -> None:
    """The one place every handler's result passes (`handlers.cleaned`): the secret in any form, anywhere
    in any field, with any text around it (control characters, escapes, lone surrogates)."""
    text = before + form + after
    raw = Sent("retry", f"internal_error: ValueError: {text}", note=text)
    sent = cleaned(raw, Redactor([SECRET]))
    for field in (sent.error, sent.note):
        assert field is not None
        assert not [f for f in secret_forms(SECRET) if f in field]
        assert len(field) <= MAX_ERROR_CHARS + len(MARK)
        assert field.isprintable() or not any(c in field for c in "\x00\x1b\n\r\x7f\x9b")


@pytest.mark.asyncio
async def test_what_fails_inside_a_handler_is_its_attempts_retry_saying_so_never_the_loops(
    rig_factory: Callable[..., Rig], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A host name the IDNA codec refuses raises inside the HTTP library (not one of its own errors):
    the attempt is a retry naming it, the loop goes on."""
    rig = rig_factory(hooked("http://xn--/hook", env_file_with(tmp_path, SECRET)))
    item = await deliver_once(rig)
    assert (item.state, item.attempts) == ("pending", 1)
    assert (item.last_error or "").startswith("internal_error: IDNAError: "), item.last_error
    assert "message_handler_failed" in caplog.text


# --- a huge, endless or trickling answer (finding 4) ---------------------------------------------------

MiB = 1 << 20


class PeakMemory:
    """The test process's peak resident memory from now on (Linux: /proc/self/clear_refs resets it)."""

    def __init__(self) -> None:
        self.reset = _write("/proc/self/clear_refs", "5")
        self.start = _status_kib("VmRSS")

    def growth_bytes(self) -> int | None:
        return (_status_kib("VmHWM") - self.start) * 1024 if self.reset else None


def _status_kib(field: str) -> int:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    assert match is not None
    return int(match.group(1))


def _write(path: str, text: str) -> bool:
    try:
        Path(path).write_text(text)
    except OSError:
        return False
    return True


BIG = {  # answers that would take the whole body into memory if it were read whole
    "500-with-256-MiB": (answer(500, b"Oops", body=b'{"error": "quota"}', filler=256 * MiB), "pending"),
    "200-with-256-MiB": (answer(200, b"OK", filler=256 * MiB), "delivered"),
    "400-with-256-MiB": (answer(400, b"Bad Request", filler=256 * MiB), "failed"),
    "500-chunked-forever": (answer(500, b"Oops", chunked=True, filler=1 << 40), "pending"),
    "502-reset-mid-body": (answer(502, b"Bad Gateway", filler=8 * MiB, length=1 << 30, reset=True), "pending"),
    "503-closed-early": (answer(503, b"Busy", body=b"partial", length=1 << 30), "pending"),
}


@pytest.mark.asyncio
@pytest.mark.parametrize(("big", "state"), BIG.values(), ids=BIG.keys())
async def test_a_huge_or_endless_answer_is_read_a_few_kib_at_most_and_judged_by_its_status_line(
    rig_factory: Callable[..., Rig], hostile: Callable[..., HostileReceiver], big: Answer, state: str
) -> None:
    receiver = hostile(big)
    rig = rig_factory(with_handlers(webhook(receiver.url, timeout_s=20), default="hook"))
    await complete_with_messages(rig, {"text": "hello"})
    memory = PeakMemory()
    assert await rig.dispatcher().outbox.deliveries.deliver_due(rig.clock.now()) == 1
    growth = memory.growth_bytes()
    [item] = rig.store.list_outbox()
    status = big.head.split(b" ")[1].decode()
    assert item.state == state
    assert state == "delivered" or (item.last_error or "").startswith(f"HTTP {status} "), item.last_error
    assert receiver.sent[0] < 16 * MiB, "the sender stopped reading: only socket buffers' worth was sent"
    assert growth is None or growth < 64 * MiB, f"{growth / MiB:.0f} MiB more resident at the peak"


@pytest.mark.asyncio
async def test_an_answers_first_words_are_its_error_and_the_body_beyond_them_is_never_read(
    rig_factory: Callable[..., Rig], hostile: Callable[..., HostileReceiver]
) -> None:
    body = b'{"error": "quota",\n  "detail": "\x1b[31mtry later"}' + b" " * (BODY_CAP_BYTES - 40) + b"never read"
    receiver = hostile(answer(500, b"Oops", body=body))
    rig = rig_factory(with_handlers(webhook(receiver.url), default="hook"))
    item = await deliver_once(rig)
    assert item.last_error == 'HTTP 500 Oops (it said: {"error": "quota", "detail": "\\x1b[31mtry later"})'


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("trickle", "said"),
    [
        (answer(500, b"Oops", chunked=True, filler=1 << 40, pause_s=0.05), "HTTP 500 Oops"),
        (answer(200, b"OK", chunked=True, filler=1 << 40, pause_s=0.05), None),
        (answer(500, b"Oops", trickle_head=True, pause_s=0.05), "no answer within 0.5s"),
        (Answer(silent=True), "no answer within 0.5s"),
    ],
    ids=["500-trickling-its-body", "200-trickling-its-body", "trickling-its-status-line", "never-answering"],
)
async def test_a_receiver_that_trickles_forever_is_cut_at_the_handlers_timeout(
    rig_factory: Callable[..., Rig], hostile: Callable[..., HostileReceiver], trickle: Answer, said: str | None
) -> None:
    receiver = hostile(trickle)
    rig = rig_factory(with_handlers(webhook(receiver.url, timeout_s=0.5), default="hook"))
    await complete_with_messages(rig, {"text": "hello"})
    started = time.monotonic()
    with anyio.fail_after(10):
        assert await rig.dispatcher().outbox.deliveries.deliver_due(rig.clock.now()) == 1
    assert time.monotonic() - started < 5
    [item] = rig.store.list_outbox()
    assert item.state == ("pending" if said else "delivered")
    assert (item.last_error or "").startswith(said or ""), item.last_error
