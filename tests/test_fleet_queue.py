"""The fleet's queue against a real PostgreSQL (tests/pg.py): claims that never take the same task twice,
fencing tokens that only grow, and writes the current token alone may make."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import EXAMPLE_CONFIG, examples, fleet_cli, run_in_threads, run_main

from agentd.errors import InputError, SchemaMismatch
from agentd.store.fleet import FleetQueue, fleet_migrations

pytestmark = pytest.mark.process


CONTEXT = {"originSurface": "browser", "originProductId": "console", "dispatchMode": "queued"}
ORIGIN = {"submitted_by": "alice", "dispatch_context": {**CONTEXT, "initiatedAt": "2026-11-25T00:00:00Z"}}


def submit(queue: FleetQueue, n: int = 1, **fields: object) -> list[int]:
    return [
        queue.submit("example", f"s{i}", {"i": i}, origin=ORIGIN, **fields)[0].fleet_id  # type: ignore[arg-type]
        for i in range(n)
    ]


def test_init_applies_checksummed_migrations_once(dsn: str) -> None:
    queue = FleetQueue.open(dsn)
    try:
        assert [m.filename for m in queue.migrate()] == [m.filename for m in fleet_migrations()]
        assert queue.migrate() == []
        queue.require_current()
        with queue.conn.cursor() as cur:
            cur.execute("UPDATE fleet_schema_migrations SET checksum = 'edited'")
        with pytest.raises(SchemaMismatch, match="edited after it was applied"):
            queue.migrate()
    finally:
        queue.close()


def test_a_repeated_key_is_the_same_task(queue: FleetQueue) -> None:
    first, new = queue.submit("example", "s", {"a": 1}, key="k1", origin=ORIGIN)
    again, repeated = queue.submit("example", "other", {"a": 2}, key="k1", origin=ORIGIN)
    assert new and not repeated and again == first


def test_a_claim_takes_only_what_the_agent_can_run_most_urgent_first(queue: FleetQueue) -> None:
    [low] = submit(queue, priority=9)
    [urgent] = submit(queue, priority=1)
    [gpu] = submit(queue, labels=["gpu"])
    [other] = [queue.submit("other-type", None, {}, origin=ORIGIN)[0].fleet_id]
    leases = queue.claim("a1", ["example"], ["cpu"], lease_s=60, limit=10)
    assert [lease.task.fleet_id for lease in leases] == [urgent, low]
    assert [lease.task.fleet_id for lease in queue.claim("a2", ["example"], ["gpu", "cpu"], 60)] == [gpu]
    assert queue.get(other).status == "queued"


def test_tokens_grow_and_only_the_current_one_may_write(queue: FleetQueue) -> None:
    [task] = submit(queue)
    [first] = queue.claim("a1", ["example"], [], lease_s=0.01)
    with queue.conn.cursor() as cur:  # the lease runs out (the server's clock decides)
        cur.execute("UPDATE fleet_tasks SET lease_expires_at = now() - interval '1 second'")
    [second] = queue.claim("a2", ["example"], [], lease_s=60)  # a rescuer
    assert second.token > first.token and second.task.fleet_id == task
    assert not queue.renew(task, first.token, 60) and not queue.finish(task, first.token, "completed", {})
    assert queue.finish(task, second.token, "completed", {"summary": "done by a2"})
    assert not queue.finish(task, second.token, "failed", {})  # finished is finished
    done = queue.get(task)
    assert done.status == "completed" and done.result == {"summary": "done by a2"}
    kinds = [e["type"] for e in queue.events(task)]
    assert kinds == ["submitted", "claimed", "lease_expired", "claimed", "refused", "refused", "completed", "refused"]
    assert queue.claim("a3", ["example"], [], 60) == []  # a completed task is never claimed again


def test_a_late_completion_before_anyone_reclaims_still_counts(queue: FleetQueue) -> None:
    [task] = submit(queue)
    [lease] = queue.claim("a1", ["example"], [], lease_s=60)
    with queue.conn.cursor() as cur:
        cur.execute("UPDATE fleet_tasks SET lease_expires_at = now() - interval '1 second'")
    assert queue.finish(task, lease.token, "completed", {})  # still its token: nobody claimed it again


def test_a_canceled_task_refuses_its_agents_writes(queue: FleetQueue) -> None:
    [task] = submit(queue)
    [lease] = queue.claim("a1", ["example"], [], lease_s=60)
    assert queue.cancel(task, by="alice").status == "canceled"
    assert not queue.renew(task, lease.token, 60)
    with pytest.raises(InputError, match="already canceled"):
        queue.cancel(task, by="alice")


def test_concurrent_claimers_never_take_the_same_task(dsn: str, queue: FleetQueue) -> None:
    submit(queue, 200)
    taken: list[int] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        mine = FleetQueue.open(dsn)
        try:
            while leases := mine.claim(name, ["example"], [], lease_s=60, limit=3):
                with lock:
                    taken.extend(lease.task.fleet_id for lease in leases)
                for lease in leases:
                    assert mine.finish(lease.task.fleet_id, lease.token, "completed", {})
        finally:
            mine.close()

    run_in_threads(claimer, [(f"a{i}",) for i in range(8)], 120)
    assert sorted(taken) == sorted(set(taken)) and len(taken) == 200
    assert queue.counts()["tasks"]["completed"] == 200


# --- the commands ------------------------------------------------------------------------------------


def test_submit_judges_the_payload_as_task_add_does_and_writes_nothing_bad(
    dsn: str, queue: FleetQueue, capsys: pytest.CaptureFixture[str], state_dir: Path
) -> None:
    refused = fleet_cli(capsys, dsn, "submit", "--type", "example", "--payload", '{"bogus": 1}')
    assert refused.code == 2 and "payload" in refused.err and "bogus" in refused.err
    unknown = fleet_cli(capsys, dsn, "submit", "--type", "nope")
    assert unknown.code == 2 and "unknown task type 'nope'" in unknown.err
    assert queue.counts()["tasks"]["queued"] == 0


def test_submit_show_status_and_cancel(
    dsn: str, queue: FleetQueue, capsys: pytest.CaptureFixture[str], state_dir: Path, tmp_path: Path
) -> None:
    submitted = fleet_cli(
        capsys, dsn, "submit", "--type", "example", "--subject", "hi", "--label", "gpu", "--key", "k1",
        "--origin-surface", "browser", "--origin-product", "console", "--dispatch-mode", "interactive", "--json",
    ).json()  # fmt: skip
    assert submitted["new"] and submitted["labels"] == ["gpu"]
    assert submitted["origin"]["dispatch_context"]["originSurface"] == "browser"
    again = fleet_cli(capsys, dsn, "submit", "--type", "example", "--key", "k1")
    assert again.code == 0 and f"fleet task {submitted['fleet_id']} already submitted with key 'k1'" in again.out
    dsn_file = tmp_path / "fleet.dsn"
    dsn_file.write_text(dsn + "\n")
    dsn_file.chmod(0o600)
    status = run_main(capsys, EXAMPLE_CONFIG, "fleet", "status", "--dsn-file", str(dsn_file), "--json").json()
    assert status["tasks"]["queued"] == 1
    shown = fleet_cli(capsys, dsn, "show", str(submitted["fleet_id"]), "--json").json()
    assert [e["type"] for e in shown["events"]] == ["submitted"]
    assert fleet_cli(capsys, dsn, "cancel", str(submitted["fleet_id"])).code == 0
    assert fleet_cli(capsys, dsn, "cancel", str(submitted["fleet_id"])).code == 2
    assert fleet_cli(capsys, dsn, "show", "999999").code == 2


def test_an_unreachable_fleet_is_one_clear_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    gone = fleet_cli(capsys, f"host={tmp_path} dbname=x user=postgres", "status")
    assert gone.code == 1 and gone.err.startswith("agentd: cannot reach the fleet's PostgreSQL")
    assert "Traceback" not in gone.err


SECRET = "hunter2-Secret"
MALFORMED = [
    "postgresql://fleet:{secret}@[::1/fleet",  # libpq quotes the whole string back
    "{secret}",  # a file holding only the password: libpq quotes the word it stopped at
    "host=/x user=fleet {secret}",
    "host=/x password='{secret}",
    "postgresql://fleet:{secret}@127.0.0.1:5432/fleet?sslmode=nonsense",
    "postgresql://fleet:{secret}@127.0.0.1:99999/fleet",
    "host=127.0.0.1 port=1 password={secret} connect_timeout=2",  # well formed, nothing listening
]


@pytest.mark.parametrize(
    "dsn", [f"host=/nowhere user=fleet password={SECRET}", f"postgresql://fleet:{SECRET}@127.0.0.1:1/fleet"]
)
@pytest.mark.parametrize("command", ["status", "init", "show 1"])
def test_a_password_on_the_command_line_is_refused_before_anything_is_sent(
    capsys: pytest.CaptureFixture[str], dsn: str, command: str
) -> None:
    """Every user on the VM, an attempt among them, reads a process's argv in /proc/PID/cmdline."""
    refused = run_main(capsys, EXAMPLE_CONFIG, "fleet", *command.split(), "--dsn", dsn)
    assert refused.code == 2 and refused.err.startswith("agentd: --dsn: it holds a password"), refused.err
    assert SECRET not in refused.err + refused.out and "--dsn-file" in refused.err


@pytest.mark.parametrize("command", ["init", "submit --type example", "cancel 1", f"submit --batch {Path(__file__)}"])
def test_the_fleets_writes_are_refused_inside_an_attempt_before_anything_is_sent(
    dsn: str, queue: FleetQueue, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """Every other control verb refused an attempt; the fleet's submit, cancel and init did not, so an
    attempt (without run_as, where it shares the services' user and can read the dsn file) could submit
    fleet work as its operator."""
    monkeypatch.setenv("AGENTD_ATTEMPT_ID", "01ATTEMPTFROMINSIDE")
    refused = fleet_cli(capsys, dsn, *command.split())
    assert refused.code == 2 and "refused inside an attempt (AGENTD_ATTEMPT_ID=01ATTEMPTFROMINSIDE)" in refused.err
    assert queue.counts()["tasks"]["queued"] == 0
    monkeypatch.delenv("AGENTD_ATTEMPT_ID")
    assert fleet_cli(capsys, dsn, "status").code == 0, "a read is not a control verb"


@pytest.mark.parametrize("template", MALFORMED)
def test_a_connection_string_that_fails_is_one_line_without_its_password(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, template: str
) -> None:
    """A string libpq could not read was a psycopg traceback quoting it, password and all, from the CLI,
    and from the dispatcher a crash that stopped local work too."""
    dsn_file = tmp_path / "fleet.dsn"
    dsn_file.write_text(template.format(secret=SECRET) + "\n")
    dsn_file.chmod(0o600)
    refused = run_main(capsys, EXAMPLE_CONFIG, "fleet", "status", "--dsn-file", str(dsn_file))
    assert refused.code == 1 and "Traceback" not in refused.err, refused.err
    assert refused.err.startswith(("agentd: the fleet's connection string is not", "agentd: cannot reach the fleet"))
    assert len(refused.err.strip().splitlines()) == 1 and SECRET not in refused.err + refused.out, refused.err


# A password with a mark no fixed text of a message holds, so a message that shows it shows the password.
PASSWORDS = st.tuples(*[st.text(st.characters(codec="ascii", exclude_characters="\x00"), max_size=20)] * 2).map(
    lambda parts: f"{parts[0]}Q7x{parts[1]}"
)


@settings(max_examples=examples(400), deadline=None)
@example(secret='0"000000Q7x', template="host=/x user=fleet {secret}")  # a quote in it hid where libpq's ended
@example(secret='=" hidden"Q7x', template="{secret}")
@example(secret="0000%80Q7x", template=MALFORMED[4])  # percent-decoded, not UTF-8: a UnicodeDecodeError
@example(secret="Q7x@.", template=MALFORMED[0])  # a host name IDNA cannot encode: a UnicodeError
@given(secret=PASSWORDS, template=st.sampled_from(MALFORMED[:-1]))
def test_whatever_the_password_libpq_is_never_the_one_to_show_it(secret: str, template: str) -> None:
    from agentd.store.fleet_connect import FleetUnavailable, connect

    try:
        connect(template.format(secret=secret))
    except FleetUnavailable as exc:
        assert secret not in str(exc), str(exc)
    except Exception as exc:  # the test's point: nothing but FleetUnavailable
        raise AssertionError(f"{type(exc).__name__} escaped: {exc}") from None


def test_config_check_names_a_connection_string_libpq_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support import agent_config

    dsn_file = tmp_path / "fleet.dsn"
    dsn_file.write_text(f"postgresql://fleet:{SECRET}@[::1/fleet\n")
    dsn_file.chmod(0o600)
    path = agent_config(tmp_path / "agent", lambda raw: raw.update(fleet={"dsn_file": str(dsn_file)}))
    checked = run_main(capsys, path, "config", "check")
    assert checked.code == 2 and f"fleet.dsn_file: {dsn_file}: the fleet's connection string is not" in checked.err
    assert SECRET not in checked.err
    dsn_file.write_text(f"postgresql://fleet:{SECRET}@[::1]/fleet\n")
    assert run_main(capsys, path, "config", "check").code == 0, "well formed: whether it connects is not config's"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--label", "has space"], "--label: expected letters, digits"),
        (["--label", "x" * 129], "--label: expected letters, digits"),
        (["--subject", "a\x00b"], "--subject: holds the character U+0000"),
        (["--payload", '{"note": "a\\u0000b"}'], "--payload: holds the character U+0000"),
        (["--key", "k\x00"], "--key: holds the character U+0000"),
        (["--priority", "0"], "--priority: expected 1 (most urgent) to 10"),
        (["--origin-product", "a\x07b"], "--origin-product:"),
        (["--subject", "s" * 600], "--subject"),
    ],
)
def test_submit_refuses_what_postgresql_or_a_task_cannot_hold_and_writes_nothing(
    dsn: str, queue: FleetQueue, capsys: pytest.CaptureFixture[str], state_dir: Path, args: list[str], says: str
) -> None:
    refused = fleet_cli(capsys, dsn, "submit", "--type", "example", *args)
    assert refused.code == 2 and refused.err.startswith(f"agentd: {says}"), refused.err
    assert "Traceback" not in refused.err
    assert queue.counts()["tasks"]["queued"] == 0


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"host=/x password=\xff\n", "not UTF-8 (invalid start byte at byte 17)"),
        (b"host=/x " + b"x" * (1 << 20), "cannot read it: over 1,048,576 bytes"),
        (b"  \n", "is empty"),
    ],
    ids=["not UTF-8", "over a mebibyte", "blank"],
)
def test_a_dsn_file_agentd_cannot_use_is_one_line_from_the_cli_and_the_service(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, says: str
) -> None:
    from agentd.services.fleet import read_dsn
    from agentd.store.fleet_connect import FleetUnavailable

    dsn_file = tmp_path / "fleet.dsn"
    dsn_file.write_bytes(content)
    dsn_file.chmod(0o600)
    refused = run_main(capsys, EXAMPLE_CONFIG, "fleet", "status", "--dsn-file", str(dsn_file))
    assert refused.code == 2 and refused.err.startswith(f"agentd: --dsn-file: {dsn_file}"), refused.err
    assert says in refused.err and "Traceback" not in refused.err
    with pytest.raises(FleetUnavailable, match=f"^\\[fleet\\] dsn_file: {dsn_file}.*{says.split(' (')[0]}"):
        read_dsn(dsn_file)


@pytest.mark.parametrize("command", ["show", "cancel"])
def test_a_fleet_id_past_what_postgresql_holds_is_refused_before_connecting(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    refused = run_main(capsys, EXAMPLE_CONFIG, "fleet", command, "99999999999999999999", "--dsn", "host=/nowhere")
    assert refused.code == 2 and "expected an id from 1 to 9223372036854775807" in refused.err, refused.err


def test_config_check_wants_a_private_dsn_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from support import agent_config

    dsn_file = tmp_path / "fleet.dsn"
    dsn_file.write_text("host=/nowhere\n")
    dsn_file.chmod(0o644)
    path = agent_config(tmp_path / "agent", lambda raw: raw.update(fleet={"dsn_file": str(dsn_file)}))
    checked = run_main(capsys, path, "config", "check")
    assert checked.code == 2 and f"fleet.dsn_file: {dsn_file} holds secrets but others can read it" in checked.err
    dsn_file.unlink()
    assert "fleet.dsn_file: expected a file, found none" in run_main(capsys, path, "config", "check").err


# --- what an agent runs for every task stays cheap (bench/fleet.py measures it) ------------------------


def test_a_claim_keeps_one_cached_plan_whatever_the_queue_holds(queue: FleetQueue) -> None:
    """With its LIMIT a parameter, a claim over a few thousand tasks was planned anew every time (the
    generic plan, costed for a tenth of the table, never won): planning cost more than running it."""
    with queue.conn.cursor() as cur:
        cur.execute(
            """INSERT INTO fleet_tasks (task_type, payload, priority, origin)
               SELECT 'example', '{}', 1 + n % 10, '{}' FROM generate_series(1, 5000) AS n"""
        )
        cur.execute("ANALYZE fleet_tasks")
    for _ in range(15):  # psycopg prepares a statement at its fifth run; PostgreSQL plans five custom plans first
        assert len(queue.claim("a1", ["example"], [], lease_s=60)) == 1
    with queue.conn.cursor() as cur:
        cur.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE '%SKIP LOCKED%'"
        )
        plans = cur.fetchall()
    assert plans and all(row["custom_plans"] <= 5 and row["generic_plans"] >= 5 for row in plans), plans


def test_a_claim_and_the_requeue_before_it_are_one_transaction(queue: FleetQueue) -> None:
    """Sent together in one round trip, they still commit together: a claim that fails undoes the
    requeue, and the connection serves the next claim."""
    [task] = submit(queue)
    [first] = queue.claim("a1", ["example"], [], lease_s=60)
    with queue.conn.cursor() as cur:
        cur.execute("UPDATE fleet_tasks SET lease_expires_at = now() - interval '1 second'")
    with pytest.raises(psycopg.DataError, match="out of range"):
        queue.claim("a2", ["example"], [], lease_s=1e300)  # the new lease's end cannot be a timestamp
    assert queue.get(task).lease_token == first.token
    assert [e["type"] for e in queue.events(task)] == ["submitted", "claimed"]
    [second] = queue.claim("a2", ["example"], [], lease_s=60)
    assert second.token > first.token
    assert [e["type"] for e in queue.events(task)] == ["submitted", "claimed", "lease_expired", "claimed"]


def test_a_claims_limit_is_a_positive_integer(queue: FleetQueue) -> None:
    submit(queue, 2)
    for limit in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="limit is a positive integer"):
            queue.claim("a1", ["example"], [], lease_s=60, limit=limit)  # type: ignore[arg-type]
    assert queue.counts()["tasks"]["queued"] == 2


def test_a_result_holding_u0000_is_written_back(queue: FleetQueue) -> None:
    """jsonb cannot hold U+0000: the finish writes U+FFFD in the result and in its event's detail."""
    [task] = submit(queue)
    [lease] = queue.claim("a1", ["example"], [], lease_s=60)
    assert queue.finish(task, lease.token, "completed", {"summary": "a\x00b", "files": {"k\x00": ["\x00"]}})
    assert queue.get(task).result == {"summary": "a\ufffdb", "files": {"k\ufffd": ["\ufffd"]}}
    assert queue.events(task)[-1]["detail"] == {"summary": "a\ufffdb"}
