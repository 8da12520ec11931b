"""agentd's side of the store rows, through the store's own verbs on a real migrated file
(synchronous=FULL): enqueue with intake validation, claim + complete, the claim's latency as the
queue grows, sensor ingest through the dedupe path, and `task add --batch`. Each function returns one sample."""

from __future__ import annotations

import io
import json
import statistics
import time
from pathlib import Path

from agentd.records import AttemptEnd, AttemptPlan, TaskIntent, TaskOutcome
from agentd.services.sensor_runs import BATCH, parse_output
from agentd.store import Store
from agentd.work import batch
from agentd.work.intake import admit_task
from bench.agent import bulk_tasks, fresh, pending_tasks

PLAN = AttemptPlan("script", "script", None)
EVIDENCE_ROOT = Path("/tmp/agentd-bench-evidence")  # only recorded in the attempt row, never written
OK = TaskOutcome(status="completed", machine_status="ok", operator_summary="ok")


def enqueue_per_s(directory: Path, count: int) -> float:
    """Tasks/s through `admit_task` (payload JSON Schema included) and `enqueue_task` (the row and
    its task_enqueued event, one transaction)."""
    config, store, clock = fresh(directory)
    intent = TaskIntent(task_type="example", source="bench", payload={"note": "hello"})
    started = time.perf_counter()
    for _ in range(count):
        store.enqueue_task(admit_task(intent, config, clock.now(), trusted=True), clock.now())
    elapsed = time.perf_counter() - started
    store.close()
    return count / elapsed


def claim_complete_per_s(directory: Path, count: int) -> float:
    """Tasks/s through `claim_next_task` (the claim, the attempt row, task_claimed) then
    `end_attempt` (the outcome commit), two transactions per task as the dispatcher runs them."""
    _, store, clock = fresh(directory)
    pending_tasks(store.path, count, clock.now())
    started = time.perf_counter()
    for _ in range(count):
        claim = store.claim_next_task(clock.now(), "bench", lambda _task: PLAN, EVIDENCE_ROOT)
        assert claim is not None and claim.attempt is not None
        store.end_attempt(completed(claim.attempt.attempt_id, claim.task.task_id, store))
    elapsed = time.perf_counter() - started
    store.close()
    return count / elapsed


def completed(attempt_id: str, task_id: int, store: Store) -> AttemptEnd:
    return AttemptEnd(
        attempt_id=attempt_id,
        task_id=task_id,
        ended_at=store.clock.now(),
        exit_status="ok",
        retry_class="none",
        termination_reason="exited",
        outcome=OK,
        status="completed",
        available_at=None,
        last_error=None,
    )


def claim_queue(directory: Path, rows: int) -> Store:
    """A database holding `rows` tasks shaped as `bulk_tasks` makes them, ANALYZEd."""
    _, store, clock = fresh(directory)
    bulk_tasks(store.path, rows, clock.now())
    store.explain_claim(clock.now(), analyze=True)
    return store


def claim_p50_us(store: Store, claims: int) -> float:
    """The median of `claims` claims on `store`'s queue (each claim consumes a task)."""
    timings = []
    for _ in range(claims):
        started = time.perf_counter()
        claim = store.claim_next_task(store.clock.now(), "bench", lambda _task: PLAN, EVIDENCE_ROOT)
        timings.append(time.perf_counter() - started)
        assert claim is not None
    return statistics.median(timings) * 1e6


def sensor_lines(count: int) -> str:
    """`count` SensorEvent lines, half of them repeats: keys 0..count/2 twice over."""
    unique = count // 2
    lines = []
    for n in range(count):
        key = n % unique
        event = {
            "event_id": f"e{key}",
            "observed_at": "2026-11-22T10:00:00Z",
            "source_ref": "bench",
            "dedupe_key": f"k{key}",
            "payload": {"n": key},
            "proposed_task": {"task_type": "example", "source": "x", "subject": f"item {key}", "payload": {}},
        }
        lines.append(json.dumps(event))
    return "\n".join(lines)


def sensor_ingest_per_s(directory: Path, text: str) -> float:
    """Events/s from a sensor's stdout to the database: every line judged (`parse_output`: JSON,
    SensorEvent, the proposed task's intake) and recorded 500 per transaction with its dedupe
    check, as the sensor service does after the process ends."""
    config, store, clock = fresh(directory)
    started = time.perf_counter()
    accepted, rejected = parse_output("bench", text, config, clock.now())
    created = deduped = 0
    for offset in range(0, len(accepted), BATCH):
        counts = store.record_sensor_events("bench", accepted[offset : offset + BATCH], [], clock.now())
        created, deduped = created + counts.created, deduped + counts.deduped
    elapsed = time.perf_counter() - started
    store.close()
    lines = text.count("\n") + 1
    assert not rejected and created + deduped == lines and deduped == lines - lines // 2, (created, deduped)
    return lines / elapsed


def batch_lines(count: int) -> bytes:
    """`count` task intent lines as `agentd task add --batch` reads them: the example type, a subject
    and a payload its schema accepts, each different."""
    lines = [
        json.dumps({"task_type": "example", "subject": f"item {n}", "payload": {"note": f"n{n}"}}) for n in range(count)
    ]
    return ("\n".join(lines) + "\n").encode()


def batch_add_per_s(directory: Path, text: bytes) -> float:
    """Lines/s through what `agentd task add --batch` runs after its start-up: every line read and
    judged (JSON, TaskIntent, the operator's source, `admit_task` with the payload schema), then the
    tasks written 500 per transaction, each with its task_enqueued event."""
    config, store, clock = fresh(directory)
    started = time.perf_counter()
    judged = batch.judge_lines(batch.read_lines(io.BytesIO(text)), config, clock.now(), source="bench")
    writing = batch.write(store, judged.tasks, clock.now(), "bench")
    elapsed = time.perf_counter() - started
    store.close()
    assert not judged.bad and writing.failed is None and len(writing.task_ids) == judged.lines, (
        judged.bad[:2],
        writing.failed,
        len(writing.task_ids),
        judged.lines,
    )
    return judged.lines / elapsed
