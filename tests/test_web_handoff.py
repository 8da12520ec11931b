"""Approval hand-off: an approval request POSTed once to the [web] approval_handler webhook, signed
(HMAC-SHA256 over timestamp + body with the env_file's secret), carrying the run context; resolved through
the API with that context, a stale or mismatched one refused. A real receiver on 127.0.0.1 port 0."""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import serve_in_thread
from test_web_api import CONTEXT
from test_web_live import Stream
from webrig import Client, WebRig, serving

from agentd.control.handlers import signature
from agentd.errors import ConfigError
from agentd.work.validation import load_config

pytestmark = pytest.mark.timeout(60)
SECRET = "s3cret-for-signing"


class Receiver:
    """The external app: records each request (headers, body) and answers with `status`."""

    def __init__(self) -> None:
        self.requests: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()
        self.status = 200
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                receiver.requests.put(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/approvals"
        self.thread = serve_in_thread(self.server)

    def next(self) -> tuple[dict[str, str], dict[str, Any], bytes]:
        headers, body = self.requests.get(timeout=20)
        return headers, json.loads(body), body

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def with_handler(receiver: Receiver, env_file: Path, **web: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(raw: dict[str, Any]) -> None:
        raw["message_handlers"] = [
            {"handler_id": "approvals", "kind": "webhook", "url": receiver.url, "env_file": str(env_file)}
        ]
        raw["web"] = {"approval_handler": "approvals", **web}

    return mutate


@pytest.fixture
def web(rig_factory: Callable[..., Rig], receiver: Receiver, tmp_path: Path) -> Iterator[WebRig]:
    env_file = tmp_path / "approvals.env"
    env_file.write_text(f"AGENTD_APPROVAL_SECRET={SECRET}\n")
    env_file.chmod(0o600)
    with serving(rig_factory(with_handler(receiver, env_file))) as served:
        yield served


def submit_held(client: Client) -> int:
    answer = client.post(
        "/api/tasks", {"task_type": "example", "payload": {}, "require_approval": True, "dispatch_context": CONTEXT}
    )
    assert answer.status == 201, answer.text
    task_id: int = answer.json()["task"]["task_id"]
    return task_id


def wait_for_event(client: Client, after: int, kind: str) -> dict[str, Any]:
    stream = Stream(client, f"/api/events/stream?after={after}&type={kind}")
    try:
        return stream.event()
    finally:
        stream.close()


def test_a_request_is_handed_off_signed_with_its_context_and_resolved_with_it(web: WebRig, receiver: Receiver) -> None:
    client = web.client()
    mark = web.rig.store.last_event_sequence()
    task_id = submit_held(client)
    headers, body, raw = receiver.next()
    stamp = headers["x-agentd-timestamp"]
    assert stamp == str(int(web.rig.clock.now().timestamp()))
    expected = hmac.new(SECRET.encode(), stamp.encode() + b"." + raw, hashlib.sha256).hexdigest()
    assert headers["x-agentd-signature"] == f"sha256={expected}" == signature(SECRET, stamp, raw)
    approval = web.rig.store.pending_approvals()[0]
    assert headers["idempotency-key"] == f"approval-{approval.approval_id}"
    assert body["context"] == {"approval_id": approval.approval_id, "task_id": task_id, "attempt_id": None,
                               "dispatch_context": CONTEXT}  # fmt: skip
    assert (body["type"], body["task_type"], body["resolve"]["approve"]) == (
        "agentd.approval_requested", "example", f"/api/approvals/{task_id}/approve")  # fmt: skip
    assert SECRET not in raw.decode()
    sent = wait_for_event(client, mark, "approval_handed_off")
    assert sent["task_id"] == task_id and sent["payload"]["approval_id"] == approval.approval_id
    app = web.client("acme-app")
    resolved = app.post(f"/api/approvals/{task_id}/approve", {"context": body["context"], "note": "ok by acme"})
    assert resolved.status == 200, resolved.text
    assert not web.rig.store.get_task_or_raise(task_id).awaiting_approval
    assert receiver.requests.empty(), "each request is handed off once"


def test_a_stale_or_mismatched_context_is_refused_and_resolves_nothing(web: WebRig, receiver: Receiver) -> None:
    client = web.client()
    task_id = submit_held(client)
    _, first, _ = receiver.next()
    context = first["context"]
    for key, wrong in (("dispatch_context", dict(CONTEXT, originProductId="other")), ("attempt_id", "01ABC"),
                       ("task_id", task_id + 1)):  # fmt: skip
        refused = client.post(f"/api/approvals/{task_id}/approve", {"context": context | {key: wrong}})
        assert refused.status == 409 and refused.error_at() == f"body.context.{key}", refused.text
    assert client.post(f"/api/approvals/{task_id}/approve", {"context": "yes"}).error_at() == "body.context"
    assert web.rig.store.get_task_or_raise(task_id).awaiting_approval
    assert client.post(f"/api/approvals/{task_id}/deny", {"reason": "not yet"}).status == 200
    assert client.post(f"/api/tasks/{task_id}/retry").status == 200  # asks for approval again: a new request
    _, second, _ = receiver.next()
    assert second["approval_id"] != context["approval_id"]
    stale = client.post(f"/api/approvals/{task_id}/approve", {"context": context})
    assert stale.status == 409 and stale.error_at() == "body.context.approval_id"
    assert web.rig.store.get_task_or_raise(task_id).awaiting_approval
    assert client.post(f"/api/approvals/{task_id}/approve", {"context": second["context"]}).status == 200


def test_a_failed_send_is_retried_with_the_same_body_and_a_refusal_ends_it(web: WebRig, receiver: Receiver) -> None:
    client = web.client()
    receiver.status = 503
    mark = web.rig.store.last_event_sequence()
    task_id = submit_held(client)
    headers, body, raw = receiver.next()
    retrying = wait_for_event(client, mark, "approval_handoff_retrying")
    assert retrying["payload"]["attempts"] == 1 and "HTTP 503" in retrying["payload"]["error"]
    assert receiver.requests.empty(), "not before its backoff"
    web.rig.clock.advance(60)  # past its backoff
    again_headers, again, again_raw = receiver.next()
    assert again_raw == raw and again_headers["idempotency-key"] == headers["idempotency-key"]
    assert again_headers["x-agentd-signature"] == signature(SECRET, again_headers["x-agentd-timestamp"], raw)
    assert wait_for_event(client, retrying["sequence"], "approval_handoff_retrying")["payload"]["attempts"] == 2
    receiver.status = 400
    web.rig.clock.advance(120)
    receiver.next()
    failed = wait_for_event(client, mark, "approval_handoff_failed")
    assert failed["task_id"] == task_id and "HTTP 400" in failed["payload"]["error"]
    assert web.rig.store.get_task_or_raise(task_id).awaiting_approval, "the console still has the approval"
    assert body == again


@pytest.mark.parametrize(
    ("handlers", "message"),
    [
        ([], "found no such handler"),
        ([{"handler_id": "approvals", "kind": "spool", "path": "/tmp/x.jsonl"}], "found a spool handler"),
        ([{"handler_id": "approvals", "kind": "webhook", "url": "http://127.0.0.1:9/"}], "needs an env_file"),
    ],
)
def test_config_refuses_an_approval_handler_that_cannot_sign(
    tmp_path: Path, handlers: list[dict[str, Any]], message: str
) -> None:
    from support import agent_config

    def mutate(raw: dict[str, Any]) -> None:
        raw["message_handlers"] = handlers
        raw["web"] = {"approval_handler": "approvals"}

    with pytest.raises(ConfigError) as refused:
        load_config(agent_config(tmp_path, mutate))
    assert message in str(refused.value) or any(message in str(p) for p in refused.value.problems)


def test_nothing_is_sent_for_a_request_resolved_before_its_send(web: WebRig, receiver: Receiver) -> None:
    """Issue 44: a request was still POSTed after its approval was denied (freshly timestamped and
    signed; resolving it gave 409). A due send whose approval is settled is withdrawn, never sent."""
    client = web.client()
    receiver.status = 503
    mark = web.rig.store.last_event_sequence()
    task_id = submit_held(client)
    receiver.next()
    retrying = wait_for_event(client, mark, "approval_handoff_retrying")
    assert client.post(f"/api/approvals/{task_id}/deny", {"reason": "no"}).status == 200
    web.rig.clock.advance(60)  # its resend is due
    withdrawn = wait_for_event(client, retrying["sequence"], "approval_handoff_withdrawn")
    assert withdrawn["task_id"] == task_id and withdrawn["payload"]["approval_id"] == retrying["payload"]["approval_id"]
    assert receiver.requests.empty(), "nothing was sent for the denied request"


def test_the_hand_off_carries_a_token_that_resolves_that_request_only_with_its_context(
    web: WebRig, receiver: Receiver
) -> None:
    """Issue 44: the receiver held a full operator token (it could pause dispatch), and a resolution
    without `context` skipped the staleness checks."""
    client = web.client()
    first_id, second_id = submit_held(client), submit_held(client)
    sent = {body["task_id"]: body for body in (receiver.next()[1], receiver.next()[1])}
    token = sent[first_id]["resolve"]["token"]
    assert token.startswith("approval.") and SECRET not in token
    app = Client(web.url, token)
    assert app.get("/api/status").status == 401 and app.post("/api/pause", {}).status == 401
    assert web.rig.store.dispatch_pause() is None
    bare = app.post(f"/api/approvals/{first_id}/approve", {"note": "no context"})
    assert bare.status == 422 and bare.error_at() == "body.context", bare.text
    other = app.post(f"/api/approvals/{second_id}/approve", {"context": sent[second_id]["context"]})
    assert other.status == 403 and other.error_at() == "header.authorization", other.text
    forged = Client(web.url, token[:-1] + ("0" if token[-1] != "0" else "1"))
    assert forged.post(f"/api/approvals/{first_id}/approve", {"context": sent[first_id]["context"]}).status == 401
    assert web.rig.store.get_task_or_raise(second_id).awaiting_approval
    done = app.post(f"/api/approvals/{first_id}/deny", {"context": sent[first_id]["context"], "reason": "by acme"})
    assert done.status == 200, done.text
    resolved = [e for e in web.rig.store.read_events(limit=10_000) if e.type == "approval_resolved"]
    assert resolved[-1].payload["by"] == "approval_handler:approvals"


def test_a_resolution_keyed_by_an_approval_resolves_only_that_request(web: WebRig, receiver: Receiver) -> None:
    """Approve checked the context, then resolved the task's pending request in another transaction
    without its id: a deny and retry committed in between let the old context approve the new request.
    The store resolves only the approval named."""
    from agentd.store.control import StaleApproval

    rig, client = web.rig, web.client()
    task_id = submit_held(client)
    old = receiver.next()[1]["context"]["approval_id"]
    rig.store.resolve_approval(task_id, approved=False, by="test", note="no", now=rig.clock.now())
    rig.store.retry_task(task_id, 1, rig.clock.now(), by="test")
    with pytest.raises(StaleApproval):
        rig.store.resolve_approval(task_id, approved=True, by="x", note=None, now=rig.clock.now(), approval_id=old)
    assert rig.store.get_task_or_raise(task_id).awaiting_approval


def test_a_held_tool_call_is_handed_off_and_its_token_answers_that_call_only(web: WebRig, receiver: Receiver) -> None:
    """Issue 45: a call an `ask` rule holds goes to the approval handler too, with a token that answers it
    and nothing else."""
    from test_web_calls import hold

    rig = web.rig
    call_id, other = hold(rig), hold(rig, "wget https://example.com")
    sent = {body["call_id"]: body for body in (receiver.next()[1], receiver.next()[1])}
    body = sent[call_id]
    assert (body["type"], body["tool"], body["summary"]) == (
        "agentd.tool_call_requested", "Bash", "Bash: curl https://example.com")  # fmt: skip
    assert body["resolve"]["approve"] == f"/api/calls/{call_id}/approve" and SECRET not in json.dumps(body)
    app = Client(web.url, body["resolve"]["token"])
    assert app.post("/api/pause", {}).status == 401
    wrong = app.post(f"/api/calls/{other}/approve", {})
    assert wrong.status == 403 and wrong.error_at() == "header.authorization", wrong.text
    assert rig.store.held_call(other).status == "pending"
    done = app.post(f"/api/calls/{call_id}/deny", {"reason": "not from this VM", "context": body["context"]})
    assert done.status == 200, done.text
    assert (done.json()["status"], done.json()["by"]) == ("denied", "approval_handler:approvals")
    assert app.post(f"/api/calls/{call_id}/approve", {}).status == 409


def test_a_held_calls_hand_off_shows_its_tail_however_it_is_padded(web: WebRig, receiver: Receiver) -> None:
    """Issue 50, finding 2: the hand-off of a call whose tail hides behind padding carries the command whole
    in its summary (blanks escaped: the tail in view), and its whole input with its length and sha256."""
    from support import HIDDEN_HEAD, HIDDEN_TAIL, PADDINGS, in_view
    from test_web_calls import hold

    from agentd.hashing import canonical_json, sha256_hex

    wanted = {hold(web.rig, HIDDEN_HEAD + pad + HIDDEN_TAIL): name for name, pad in PADDINGS.items()}
    bodies = [receiver.next()[1] for _ in wanted]
    for body in bodies:
        pad = PADDINGS[wanted[body["call_id"]]]
        whole = canonical_json({"command": HIDDEN_HEAD + pad + HIDDEN_TAIL}).decode()
        assert in_view(body["summary"], pad), body["summary"]
        assert (body["input_json"], body["input_chars"], body["input_sha256"]) == (
            whole, len(whole), sha256_hex(whole.encode()))  # fmt: skip
    assert sorted(body["call_id"] for body in bodies) == sorted(wanted)
