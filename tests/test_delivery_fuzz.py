"""Whatever a webhook's receiver answers, as bytes on a real socket (tests/hostile_http.py): any status
line, reason phrase (control characters, the handler's secret), header fields (Retry-After of any form),
body of any size or encoding, an answer cut short or reset, HTTP/0.9 garbage, silence. A send never
raises; the attempt ends delivered, retried or failed, with a reason that holds no secret."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from hostile_http import Answer, HostileReceiver, answer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples
from test_delivery_answers import SECRET, secret_runs

from agentd.clock import FakeClock
from agentd.control.delivery import next_step
from agentd.control.handlers import MAX_ERROR_CHARS, send
from agentd.records.messages import Delivery, Sent, WebhookHandler
from agentd.redaction import MARK

U = SECRET.encode()
TIMEOUT_S = 0.5

words = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=40).map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.sampled_from([U, SECRET.encode("latin-1"), b"\x1b[2J" + U, b"\x00\x7f\x9b", repr(U).encode()]),
)
retry_after = st.one_of(
    st.from_regex(rb"\A[ \t]*-?[0-9]{0,30}(\.[0-9]+)?[ \t]*\Z"),
    st.sampled_from([b"\xc2\xb2", "١٢٠".encode(), b"Sun, 06 Nov 1994 08:49:37 GMT", b"Fri, 31 Dec 9999 23:59:59 GMT"]),
    st.sampled_from([b"Sunday, 06-Nov-94 08:49:37 GMT", b"Sun Nov  6 08:49:37 1994", b"120, 60", U]),
    words,
)
fields = st.lists(
    st.one_of(
        st.tuples(st.just(b"Retry-After"), retry_after),
        st.tuples(st.sampled_from([b"X-Echo", b"Content-Type", b"Set-Cookie", b"Content-Encoding"]), words),
        st.tuples(st.binary(min_size=1, max_size=12), words),
    ),
    max_size=4,
)


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    """An HTTP/1.1 answer of any shape, or something that is not one."""
    shape = draw(st.sampled_from(["http"] * 8 + ["garbage", "silent"]))
    if shape == "silent":
        return Answer(silent=True)
    if shape == "garbage":  # HTTP/0.9, a line that is no status line, nothing at all
        return Answer(head=draw(st.one_of(st.binary(max_size=80), words.map(lambda w: w + b"\r\n\r\n"))))
    status = draw(st.one_of(st.integers(100, 999), st.binary(min_size=1, max_size=4)))
    return answer(
        status,
        draw(words),
        draw(fields),
        draw(st.one_of(st.binary(max_size=300), words)),
        length=draw(st.one_of(st.none(), st.integers(0, 1 << 40))),
        filler=draw(st.sampled_from([0, 0, 10, 5000, 1 << 20])),
        chunked=draw(st.booleans()),
        reset=draw(st.booleans()),
    )


@pytest.fixture(scope="module")
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / "hook.env"
    path.write_text(f"TOKEN={SECRET}\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def receiver() -> Iterator[HostileReceiver]:
    made = HostileReceiver(Answer())
    yield made
    made.close()


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scripted=answers(), attempt=st.integers(1, 5))
def test_whatever_a_receiver_answers_the_attempt_ends_delivered_retried_or_failed_with_a_clean_reason(
    receiver: HostileReceiver, env_file: Path, tmp_path: Path, scripted: Answer, attempt: int
) -> None:
    receiver.script = lambda _n: scripted
    handler = WebhookHandler(
        handler_id="hook",
        kind="webhook",
        url=receiver.url,
        timeout_s=TIMEOUT_S,
        headers={"Authorization": "Bearer ${TOKEN}"},
        env_file=str(env_file),
        max_attempts=3,
        backoff_base_s=5,
        backoff_max_s=60,
    )
    now = FakeClock().now()
    delivery = Delivery(1, "k-1", 1, "hook", {"text": "x"}, "pending", attempt, True, now, None)

    async def attempt_once() -> Sent:
        with anyio.fail_after(TIMEOUT_S + 5):  # timeout_s bounds it all, whatever the receiver does
            return await send(handler, delivery, tmp_path, 1.0)  # and it raises nothing

    sent = anyio.run(attempt_once)
    step = next_step(handler, delivery, sent, now)
    assert step.status in ("delivered", "pending", "failed")
    if step.status != "delivered":
        reason = step.error or ""
        assert reason.strip(), "a retry or a failure says why"
        assert not [form for form in secret_runs(SECRET) if form in reason], reason
        assert reason.isprintable() and len(reason) <= MAX_ERROR_CHARS + len(MARK) + 20
        assert (step.status == "pending") == (step.next_attempt_at is not None)
    if step.status == "pending":
        assert step.next_attempt_at is not None and 5 <= (step.next_attempt_at - now).total_seconds() <= 60
