"""External messages delivered through handlers (seed 000 §9): a webhook on a real HTTP server on
127.0.0.1, a spool file, a command; exactly once per idempotency key across retries and a kill -9;
beside dispatch, never in its way; `agentd outbox list|retry`; config that names what does not exist."""

from __future__ import annotations

import getpass
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from inprocess import in_process
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rig import Rig
from support import CliResult, agent_config, ok, run_main, serve_in_thread
from test_dispatch_process import Agent

from agentd.cli import main
from agentd.clock import SystemClock
from agentd.control import handlers
from agentd.control.delivery import backoff_s, next_step
from agentd.control.handlers import http_answer
from agentd.errors import ConfigError
from agentd.outlook.metrics import DispatchMetrics
from agentd.records.messages import Delivery, Sent, WebhookHandler
from agentd.services.dispatch import Dispatcher
from agentd.store import Store
from agentd.work.validation import load_config

Mutate = Callable[[dict[str, Any]], None]


def saying(*messages: dict[str, Any]) -> dict[str, Any]:
    """A scripted task's payload: complete, asking for these external messages."""
    return {"outcome": ok(external_messages=list(messages))}


def with_handlers(*handlers: dict[str, Any], default: str | None = None, allow: bool = True) -> Mutate:
    def mutate(raw: dict[str, Any]) -> None:
        raw["message_handlers"] = list(handlers)
        if default is not None:
            raw["dispatch"]["default_message_handler"] = default
        for profile in raw["profiles"]:
            profile["result_policy"]["allow_external_messages"] = allow

    return mutate


def webhook(url: str, **fields: Any) -> dict[str, Any]:
    return {"handler_id": "hook", "kind": "webhook", "url": url, "backoff_base_s": 60, **fields}


class Receiver:
    """A webhook receiver that does what README asks of one: it dedupes by Idempotency-Key. A new key
    is processed (`processed`), a key seen before is acknowledged and not processed again. `answers`
    are the statuses of the first requests (then 200); `hold` keeps the first request open, already
    processed, until `release` is set (the sender may be killed meanwhile)."""

    def __init__(self) -> None:
        self.answers: list[int] = []
        self.hold = False
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []  # key, body, headers
        self.processed: dict[str, int] = {}
        self.duplicates = 0
        self.arrived, self.release = threading.Event(), threading.Event()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = serve_in_thread(self.server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    @property
    def keys(self) -> list[str]:
        return [key for key, _, _ in self.requests]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, hold = receiver.take(self.headers.get("Idempotency-Key", ""), body, dict(self.headers))
                if hold:
                    receiver.arrived.set()
                    receiver.release.wait(30)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender is gone (killed while we held its request)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def take(self, key: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, bool]:
        with self._lock:
            self.requests.append((key, body, headers))
            status = self.answers.pop(0) if self.answers else 200
            hold, self.hold = self.hold, False
            if status < 300 and key in self.processed:
                self.duplicates += 1
            elif status < 300:
                self.processed[key] = 1
            return status, hold

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    yield made
    made.close()


async def eventually(condition: Callable[[], Any]) -> Any:
    """Poll the database until `condition` holds, with a hard deadline of 20 s."""
    with anyio.fail_after(20):
        while not (found := condition()):  # noqa: ASYNC110 (the store has no event to wait on)
            await anyio.sleep(0.02)
    return found


def message_events(rig: Rig, task_id: int) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, e.payload) for e in rig.events(task_id) if e.type.startswith("message_")]


async def complete_with_messages(rig: Rig, *messages: dict[str, Any]) -> tuple[int, list[str]]:
    """Run one scripted task whose outcome asks for `messages`; (task id, the messages' outbox keys)."""
    task = rig.add("scripted", payload=saying(*messages))
    dispatcher = rig.dispatcher()
    await dispatcher.start()
    await dispatcher.run_until_idle()
    await dispatcher.stop()
    assert rig.store.get_task_or_raise(task.task_id).status == "completed"
    return task.task_id, [e["key"] for e in rig.store.outbox_of(task.task_id) if e["kind"] == "external_message"]


# --- 1. a webhook that fails twice, beside a dispatcher that keeps working -------------------------


@pytest.mark.asyncio
async def test_a_webhook_failing_twice_accepts_the_message_once_under_one_key_while_dispatch_goes_on(
    rig_factory: Callable[..., Rig], receiver: Receiver
) -> None:
    receiver.answers = [500, 500]
    rig = rig_factory(with_handlers(webhook(receiver.url), default="hook"))
    metrics = DispatchMetrics("demo", rig.config.db_path, rig.clock)
    dispatcher = Dispatcher(rig.config, rig.db, clock=rig.clock, metrics=metrics, adapters=in_process)
    await dispatcher.start()
    task = rig.add("scripted", payload=saying({"text": "hello", "to": "ops"}))
    await dispatcher.run_until_idle()
    [key] = [e["key"] for e in rig.store.outbox_of(task.task_id)]
    deliveries = dispatcher.outbox.deliveries

    assert await deliveries.deliver_due(rig.clock.now()) == 1  # 500
    [waiting] = rig.store.list_outbox(state="pending")
    assert (waiting.attempts, waiting.last_error) == (1, "HTTP 500 Internal Server Error")
    assert waiting.next_attempt_at == rig.clock.now() + timedelta(seconds=60)
    other = rig.add("example")  # between the retries, dispatch claims and completes other work
    assert await dispatcher.run_until_idle() == 1
    assert rig.store.get_task_or_raise(other.task_id).status == "completed"
    assert await deliveries.deliver_due(rig.clock.now()) == 0  # not due yet
    rig.clock.advance(60)
    assert await deliveries.deliver_due(rig.clock.now()) == 1  # 500 again: the next waits 120 s
    rig.clock.advance(119)
    assert await deliveries.deliver_due(rig.clock.now()) == 0
    rig.clock.advance(1)
    assert await deliveries.deliver_due(rig.clock.now()) == 1  # 200

    assert receiver.keys == [key, key, key]
    assert receiver.processed == {key: 1}
    assert all(body == {"text": "hello", "to": "ops"} for _, body, _ in receiver.requests)
    [item] = rig.store.list_outbox()
    assert (item.state, item.attempts, item.handler_id) == ("delivered", 3, "hook")
    [entry] = rig.store.outbox_of(task.task_id)
    assert entry["status"] == "applied"
    events = message_events(rig, task.task_id)
    assert [(t, p["attempt"], p.get("outcome")) for t, p in events] == [
        ("message_delivery_started", 1, None),
        ("message_delivery_attempted", 1, "retry"),
        ("message_delivery_started", 2, None),
        ("message_delivery_attempted", 2, "retry"),
        ("message_delivery_started", 3, None),
        ("message_delivered", 3, None),
    ]
    assert all(p["key"] == key and p["handler"] == "hook" for _, p in events)
    assert "hello" not in json.dumps([p for _, p in events]), "events carry the key, never the message"
    assert rig.store.verify_event_chain() == []
    counted = {
        (sample.labels["handler"], sample.labels["outcome"]): sample.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for sample in family.samples
        if sample.name == "agentd_messages_total"
    }
    assert counted == {("hook", "retry"): 2.0, ("hook", "delivered"): 1.0}
    await dispatcher.stop()


@pytest.mark.asyncio
async def test_a_receiver_holding_the_request_does_not_hold_up_the_next_claim(
    rig_factory: Callable[..., Rig], receiver: Receiver
) -> None:
    """The real loops: the dispatcher's and the delivery loop beside it, in one task group."""
    receiver.hold = True
    rig = rig_factory(with_handlers(webhook(receiver.url), default="hook"))
    dispatcher = rig.dispatcher()
    sent = rig.add("scripted", payload=saying({"text": "slow receiver"}))
    async with anyio.create_task_group() as group:
        group.start_soon(dispatcher.run)
        assert await anyio.to_thread.run_sync(receiver.arrived.wait, 20), "the message was sent"
        other = rig.add("example")
        dispatcher.doorbell.ring()  # as `agentd task add` pokes it
        await eventually(lambda: rig.store.get_task_or_raise(other.task_id).status == "completed")
        assert [i.state for i in rig.store.list_outbox()] == ["pending"], "the message is still being sent"
        receiver.release.set()
        await eventually(lambda: rig.store.list_outbox(state="delivered"))
        dispatcher.request_stop()
    assert rig.store.get_task_or_raise(sent.task_id).status == "completed"
    assert receiver.processed == {rig.store.outbox_of(sent.task_id)[0]["key"]: 1}


def test_what_an_http_answer_means_and_how_long_the_next_attempt_waits() -> None:
    assert http_answer(204, "No Content").outcome == "delivered"
    assert http_answer(404, "Not Found").outcome == "rejected"
    assert http_answer(408, "Request Timeout").outcome == "retry"
    assert http_answer(429, "Too Many Requests", ["120"]) == Sent("retry", "HTTP 429 Too Many Requests", 120.0)
    assert http_answer(302, "Found").outcome == "retry"
    assert http_answer(503, "Service Unavailable", ["soon"]).retry_after_s is None
    handler = WebhookHandler(
        handler_id="h", kind="webhook", url="https://x.test/", backoff_base_s=10, backoff_max_s=100, max_attempts=6
    )
    now = SystemClock().now()
    waits = [backoff_s(handler, n, Sent("retry"), now) for n in range(1, 6)]
    assert waits == [10, 20, 40, 80, 100]
    assert backoff_s(handler, 1, Sent("retry", retry_after_s=50), now) == 50
    assert backoff_s(handler, 1, Sent("retry", retry_after_s=5000), now) == 100
    assert backoff_s(handler, 1, Sent("retry", retry_at=now + timedelta(seconds=70)), now) == 70
    assert backoff_s(handler, 1, Sent("retry", retry_at=now - timedelta(days=1)), now) == 10
    delivery = Delivery(1, "k", 1, "h", {}, "pending", 6, True, now, None)
    assert next_step(handler, delivery, Sent("retry", "HTTP 500"), now).status == "failed"
    assert next_step(handler, delivery, Sent("delivered"), now).status == "delivered"


# --- 2. kill -9 mid-delivery -------------------------------------------------------------------


@pytest.mark.process
def test_kill_9_mid_delivery_then_restart_sends_the_same_key_and_the_receiver_accepts_once(
    tmp_path: Path, receiver: Receiver
) -> None:
    receiver.hold = True  # processed, but no answer: the dispatcher dies before it records delivery
    agent = Agent(tmp_path, {}, with_handlers(webhook(receiver.url), default="hook"))
    try:
        task_id = agent.add(outcome=ok(external_messages=[{"text": "once"}]))
        first = agent.start()
        assert receiver.arrived.wait(30), "the first dispatcher sent the message"
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        receiver.release.set()
        second = agent.start()
        agent.wait_event("message_delivered", task_id, timeout=30)
        [entry] = agent.store.outbox_of(task_id)
        assert receiver.keys == [entry["key"], entry["key"]], "the same key, never a second one"
        assert receiver.processed == {entry["key"]: 1} and receiver.duplicates == 1
        events = [(e.type, e.payload) for e in agent.store.read_events(task_id=task_id) if "message_" in e.type]
        assert [(t, p["attempt"], p.get("outcome")) for t, p in events] == [
            ("message_delivery_started", 1, None),
            ("message_delivery_attempted", 1, "interrupted"),
            ("message_delivery_started", 2, None),
            ("message_delivered", 2, None),
        ]
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=15) == 0
    finally:
        agent.close()


# --- 3. spool ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_a_spool_gets_one_fsynced_line_per_message_and_a_resend_never_writes_a_key_twice(
    rig_factory: Callable[..., Rig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = tmp_path / "outbound" / "messages.jsonl"
    rig = rig_factory(with_handlers({"handler_id": "spool", "kind": "spool", "path": str(spool)}, default="spool"))
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:  # the real fsync, noting which file it made durable
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    task_id, keys = await complete_with_messages(rig, {"n": 1}, {"n": 2})
    deliveries = rig.dispatcher().outbox.deliveries
    assert await deliveries.deliver_due(rig.clock.now()) == 2
    lines = [json.loads(line) for line in spool.read_text().splitlines()]
    assert sorted((x["idempotency_key"], x["message"]["n"], x["task_id"]) for x in lines) == [
        (keys[0], 1, task_id),
        (keys[1], 2, task_id),
    ]
    assert synced.count(str(spool)) == 2
    assert spool.stat().st_mode & 0o777 == 0o600

    # A dispatcher writes the line, then dies before it records the delivery; the next one resends.
    _, [key] = await complete_with_messages(rig, {"n": 3})
    [due] = await rig.db.call(Store.due_deliveries, rig.clock.now())
    started = await rig.db.call(Store.start_delivery_attempt, due.outbox_id, rig.clock.now())
    assert started is not None
    handler = rig.config.message_handlers["spool"]
    assert (await handlers.send(handler, started, tmp_path, 1.0)).outcome == "delivered"
    with spool.open("ab") as torn:  # and another's write was cut short by the same crash
        torn.write(b'{"idempotency_key":"torn","mess')
    restarted = rig.dispatcher().outbox.deliveries
    assert await rig.db.call(Store.sweep_deliveries, rig.clock.now()) == 1  # what run() does first
    assert await restarted.deliver_due(rig.clock.now()) == 1
    *whole, cut = spool.read_text().splitlines()  # the torn line stays (it may be another writer's, unfinished)
    assert cut == '{"idempotency_key":"torn","mess'
    lines = [json.loads(line) for line in whole]
    assert [x["idempotency_key"] for x in lines].count(key) == 1
    assert len(lines) == 3
    assert [i.state for i in rig.store.list_outbox()] == ["delivered"] * 3


# --- 4. command --------------------------------------------------------------------------------

RECEIVE = """
import json, os, sys
from pathlib import Path
log = Path(sys.argv[1])
with log.open("a") as out:
    out.write(json.dumps({"stdin": sys.stdin.read(), "env": dict(os.environ)}) + "\\n")
runs = len(log.read_text().splitlines())
if runs <= int(sys.argv[2]):
    print("receiver down, token " + os.environ.get("TOKEN", ""), file=sys.stderr)
    sys.exit(3)
"""


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_command_gets_the_message_on_stdin_and_only_its_environment_and_is_retried(
    rig_factory: Callable[..., Rig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script, log, secrets = tmp_path / "receive.py", tmp_path / "runs.jsonl", tmp_path / "hook.env"
    script.write_text(RECEIVE)
    secrets.write_text("TOKEN=s3cret-value-123\n")
    secrets.chmod(0o600)
    monkeypatch.setenv("LEAKED_FROM_THE_SERVICE", "x")
    command = {
        "handler_id": "cmd",
        "kind": "command",
        "argv": [sys.executable, str(script), str(log), "1"],
        "env_file": str(secrets),
        "env": {"GREETING": "hi"},
        "backoff_base_s": 30,
    }
    rig = rig_factory(with_handlers(command, default="cmd"))
    task_id, [key] = await complete_with_messages(rig, {"text": "by command"})
    deliveries = rig.dispatcher().outbox.deliveries
    assert await deliveries.deliver_due(rig.clock.now()) == 1  # exit 3: retried
    [waiting] = rig.store.list_outbox(state="pending")
    assert waiting.last_error == "exit 3: receiver down, token [redacted]", "the env_file's secret is redacted"
    rig.clock.advance(30)
    assert await deliveries.deliver_due(rig.clock.now()) == 1  # exit 0
    assert [i.state for i in rig.store.list_outbox()] == ["delivered"]
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert [json.loads(r["stdin"]) for r in runs] == [{"text": "by command"}] * 2
    env = runs[0]["env"]
    assert env["AGENTD_IDEMPOTENCY_KEY"] == key and runs[1]["env"]["AGENTD_IDEMPOTENCY_KEY"] == key
    assert (env["TOKEN"], env["GREETING"], env["AGENTD_TASK_ID"]) == ("s3cret-value-123", "hi", str(task_id))
    assert "LEAKED_FROM_THE_SERVICE" not in env
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "TZ", "HOME", "TMPDIR", "TOKEN", "GREETING", "PWD"} | {
        name for name in env if name.startswith("AGENTD_") or name.startswith("LC_")
    }
    assert not list((rig.config.paths.state_dir / "deliveries").iterdir()), "its scratch folders are removed"


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_command_that_keeps_failing_is_failed_after_max_attempts_with_events(
    rig_factory: Callable[..., Rig], tmp_path: Path
) -> None:
    script, log = tmp_path / "receive.py", tmp_path / "runs.jsonl"
    script.write_text(RECEIVE)
    command = {
        "handler_id": "cmd",
        "kind": "command",
        "argv": [sys.executable, str(script), str(log), "99"],
        "max_attempts": 2,
        "backoff_base_s": 0,
    }
    rig = rig_factory(with_handlers(command, default="cmd"))
    task_id, [key] = await complete_with_messages(rig, {"text": "never"})
    deliveries = rig.dispatcher().outbox.deliveries
    assert await deliveries.deliver_due(rig.clock.now()) == 1
    assert await deliveries.deliver_due(rig.clock.now()) == 1
    assert await deliveries.deliver_due(rig.clock.now()) == 0, "failed: not tried a third time"
    [item] = rig.store.list_outbox()
    assert (item.state, item.attempts) == ("failed", 2)
    assert item.reason == "delivery failed after 2 attempt(s): exit 3: receiver down, token (attempt 2 of 2)"
    assert rig.store.outbox_of(task_id)[0]["status"] == "refused"
    events = message_events(rig, task_id)
    assert [(t, p["attempt"]) for t, p in events] == [
        ("message_delivery_started", 1),
        ("message_delivery_attempted", 1),
        ("message_delivery_started", 2),
        ("message_delivery_failed", 2),
    ]
    assert events[1][1]["error"] == "exit 3: receiver down, token" and events[3][1]["key"] == key


# --- 5. agentd outbox list / retry -------------------------------------------------------------


def agentd(rig: Rig, capsys: pytest.CaptureFixture[str], *args: str) -> CliResult:
    return run_main(capsys, rig.config.path, *args)


@pytest.mark.asyncio
async def test_outbox_list_shows_a_failed_message_and_retry_sends_it_again_under_its_key(
    rig_factory: Callable[..., Rig], receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver.answers = [400]  # refused for good: failed at once
    rig = rig_factory(with_handlers(webhook(receiver.url), default="hook"))
    task_id, [key] = await complete_with_messages(rig, {"text": "try again"})
    deliveries = rig.dispatcher().outbox.deliveries
    assert await deliveries.deliver_due(rig.clock.now()) == 1
    listed = agentd(rig, capsys, "outbox", "list", "--json")
    assert listed.code == 0
    [item] = listed.json()
    assert (item["state"], item["handler"], item["attempts"], item["key"]) == ("failed", "hook", 1, key)
    assert item["reason"].startswith("delivery failed after 1 attempt(s): HTTP 400 Bad Request")
    assert agentd(rig, capsys, "outbox", "list", "--state", "delivered", "--json").json() == []
    table = agentd(rig, capsys, "outbox", "list")
    assert "failed" in table.out and key in table.out

    retried = agentd(rig, capsys, "outbox", "retry", str(item["outbox_id"]))
    assert retried.code == 0, retried.err
    assert f"key {key}" in retried.out
    [again] = rig.store.list_outbox()
    assert (again.state, again.attempts) == ("pending", 0)
    [requested] = [p for t, p in message_events(rig, task_id) if t == "message_retry_requested"]
    assert (requested["requested_by"], requested["was"], requested["key"]) == (getpass.getuser(), "failed", key)
    assert await deliveries.deliver_due(SystemClock().now()) == 1  # the CLI's clock set it due
    assert rig.store.list_outbox()[0].state == "delivered"
    assert receiver.keys == [key, key] and receiver.processed == {key: 1}

    delivered = agentd(rig, capsys, "outbox", "retry", str(item["outbox_id"]))
    assert (delivered.code, delivered.err) == (
        2,
        f"agentd: message {item['outbox_id']} is delivered: only a failed message (or one awaiting a handler) "
        "can be retried\n",
    )
    unknown = agentd(rig, capsys, "outbox", "retry", "999")
    assert (unknown.code, unknown.err) == (2, "agentd: no outbox entry 999; `agentd outbox list` shows them\n")
    assert agentd(rig, capsys, "outbox", "retry", "x").code == 2
    assert agentd(rig, capsys, "outbox", "list", "--state", "lost").code == 2


# --- 6. what the config or a message names must exist ------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (with_handlers({"handler_id": "hook", "kind": "webhook"}), "message_handlers[0].url: required, but missing"),
        (
            with_handlers({"handler_id": "hook", "kind": "webhook", "url": "ftp://x.test/"}),
            "message_handlers[0].url: expected an http:// or https:// URL with a host, found 'ftp://x.test/'",
        ),
        (
            with_handlers(webhook("https://x.test/"), default="pager"),
            "dispatch.default_message_handler: expected a known message handler (hook), found 'pager'",
        ),
        (
            with_handlers(webhook("https://x.test/", headers={"Authorization": "Bearer ${TOKEN}"})),
            "message_handlers[0].headers: name TOKEN but no env_file says what they are",
        ),
        (
            with_handlers(webhook("https://x.test/", headers={"Idempotency-Key": "mine"})),
            "agentd sets Idempotency-Key itself; remove it from headers",
        ),
        (
            with_handlers({"handler_id": "c", "kind": "command", "argv": []}),
            "message_handlers[0].argv: list should have at least 1 item",
        ),
        (
            with_handlers(webhook("https://x.test/"), webhook("https://y.test/")),
            "message_handlers[1].handler_id: duplicate id 'hook' (already message_handlers[0])",
        ),
    ],
    ids=["no-url", "not-http", "unknown-default", "secret-without-env-file", "own-header", "empty-argv", "twice"],
)
def test_a_handler_config_that_cannot_work_is_refused_naming_the_key(
    tmp_path: Path, mutate: Mutate, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = agent_config(tmp_path, mutate)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert expected in str(refused.value)
    assert main(["--config", str(path), "config", "check"]) == 2
    assert f"{path}: " in capsys.readouterr().err


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("mutate", "message", "reason"),
    [
        (
            with_handlers(webhook("https://x.test/"), default="hook"),
            {"handler": "pager", "text": "x"},
            "the message names handler 'pager', which is not configured (configured: hook)",
        ),
        (
            with_handlers(webhook("https://x.test/")),
            {"text": "x"},
            "the message names no handler and [dispatch] default_message_handler is not set (configured: hook)",
        ),
        (with_handlers(), {"text": "x"}, "no message handler configured"),
        (
            with_handlers(webhook("https://x.test/"), default="hook", allow=False),
            {"text": "x"},
            "the profile's result_policy does not allow external messages",
        ),
    ],
    ids=["unknown-handler", "no-default", "no-handlers", "policy"],
)
async def test_a_message_with_no_handler_to_take_it_is_refused_with_the_reason(
    rig_factory: Callable[..., Rig], mutate: Mutate, message: dict[str, Any], reason: str
) -> None:
    rig = rig_factory(mutate)
    task_id, _ = await complete_with_messages(rig, message)
    [item] = rig.store.list_outbox()
    assert (item.state, item.reason) == ("refused", reason)
    assert await rig.db.call(Store.due_deliveries, rig.clock.now()) == []
    assert not message_events(rig, task_id)
