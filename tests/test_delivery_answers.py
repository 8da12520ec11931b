"""What a webhook's receiver answers can never hurt the agent (issue 23): any Retry-After, a secret
echoed in any part of an answer, a huge, endless or trickling body, HTTP/0.9 garbage, a reset. Real
HTTP on 127.0.0.1 (tests/hostile_http.py), the real delivery loop, a migrated SQLite file."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from hostile_http import Answer, HostileReceiver, answer
from hypothesis import given, settings
from hypothesis import strategies as st
from rig import Rig
from test_delivery import complete_with_messages, webhook, with_handlers

from agentd.clock import FakeClock
from agentd.delivery import backoff_s
from agentd.handlers import http_answer
from agentd.records.messages import OutboxItem, Sent, WebhookHandler


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


@settings(max_examples=400, deadline=None)
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
