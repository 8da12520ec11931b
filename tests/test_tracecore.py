"""`agentd evidence export`: TraceCore run artifacts the tracecore package's own verifier accepts, for
every way an attempt ends; their artifact_hash recomputed independently; the bundle; and the
artifact_hash that two runs of the same work share.

tracecore is installed into a throwaway venv (it installs a top-level module named `tasks`, so it
is kept out of agentd's environment), once per test session, shared by the xdist workers."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from support import REPO, ok

from agentd import control
from agentd.cli import main
from agentd.evidence.tracecore import ulid_of_uuid, uuid_of_ulid
from agentd.records import TaskAttempt
from agentd.store import Store

TRACECORE = "tracecore==1.1.3"


@pytest.fixture(scope="session")
def tracecore(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `tracecore` executable of a venv kept in .cache/ (one install per version, for every run and
    worker; `make clean` removes it)."""
    shared = REPO / ".cache"
    shared.mkdir(exist_ok=True)
    venv = shared / f"tracecore-venv-{TRACECORE.split('==')[1]}"
    with open(shared / "tracecore-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "installed").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            subprocess.run([*pip, TRACECORE], check=True, capture_output=True)
            (venv / "installed").write_text(TRACECORE)
    return venv / "bin" / "tracecore"


@pytest.fixture
def five_rig(rig_factory: Callable[..., Rig]) -> Rig:
    def add(raw: dict[str, Any]) -> None:
        scripted = next(a for a in raw["adapters"] if a["adapter_id"] == "scripted")
        raw["adapters"].append({**scripted, "adapter_id": "quick", "timeout_ms": 1000})
        raw.setdefault("dispatch", {})["kill_grace_s"] = 0.5

    return rig_factory(add)


async def run_until_idle(rig: Rig) -> None:
    await rig.drain(processes=True)


async def cancel_when_started(rig: Rig, task_id: int) -> None:
    for _ in range(1000):  # 20 s: the adapter is a real process, started by the dispatcher beside us
        if any(a.pid for a in rig.store.attempts_of(task_id)):
            control.cancel_task(rig.config, rig.store, task_id, rig.clock.now())
            return
        await anyio.sleep(0.02)
    raise AssertionError(f"task {task_id}'s adapter never started")


async def claim_and_die(rig: Rig, task_id: int) -> None:
    """A dispatcher claims the task, starts it, and dies: the next one's boot sweep closes it."""
    dead = rig.dispatcher()
    root = rig.config.paths.state_dir / "attempts"
    claim = await dead.db.call(Store.claim_next_task, rig.clock.now(), "dead-runner", dead._plan, root)
    assert claim is not None and claim.task.task_id == task_id and claim.attempt is not None
    Path(claim.attempt.evidence_dir or "").mkdir(parents=True, exist_ok=True)
    await dead.db.call(Store.mark_attempt_started, task_id, claim.attempt.attempt_id, 2**22 + 1, rig.clock.now())


@pytest_asyncio.fixture
async def five(five_rig: Rig) -> dict[str, TaskAttempt]:
    """A completed, a failed, a timed-out, a canceled and a boot-swept attempt, each run for real."""
    rig = five_rig
    ids = {
        "completed": rig.add("scripted", payload={"stdout": "hello", "outcome": ok()}).task_id,
        "failed": rig.add(
            "scripted",
            payload={"outcome": {"status": "permanent_failure", "machine_status": "failed", "operator_summary": "no"}},
        ).task_id,
    }
    await run_until_idle(rig)
    ids["timed_out"] = rig.add("scripted", payload={"sleep_s": 30}, requested_adapter_id="quick").task_id
    await run_until_idle(rig)
    ids["canceled"] = rig.add("scripted", payload={"sleep_s": 30, "outcome": ok()}).task_id
    async with anyio.create_task_group() as group:
        group.start_soon(cancel_when_started, rig, ids["canceled"])
        await run_until_idle(rig)
    ids["swept"] = rig.add("scripted", payload={"outcome": ok()}).task_id
    await claim_and_die(rig, ids["swept"])
    await run_until_idle(rig)  # its boot sweep, then the re-run
    found = {kind: rig.store.attempts_of(task_id)[0] for kind, task_id in ids.items()}
    endings = {kind: (a.termination_reason, a.exit_status) for kind, a in found.items()}
    assert endings == {
        "completed": ("exited", "ok"),
        "failed": ("exited", "ok"),
        "timed_out": ("timeout", "timeout"),
        "canceled": ("operator_canceled", "error"),
        "swept": ("boot_sweep", "error"),
    }
    return found


def stable_hash(artifact: dict[str, Any]) -> str:
    """TraceCore's artifact_hash, written again from its spec (seed 001 §5.5), not from agentd's code."""
    volatile = {"run_id", "trace_id", "started_at", "completed_at", "wall_clock_elapsed_s", "artifact_hash"}
    payload = {k: v for k, v in artifact.items() if k not in volatile}
    payload["action_trace"] = [{k: v for k, v in e.items() if k != "action_ts"} for e in payload["action_trace"]]
    canonical = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@pytest.fixture
def exported(five_rig: Rig, five: dict[str, TaskAttempt], rig_cli: Any, tmp_path: Path) -> Path:
    """The five attempts (and the swept task's re-run) exported as TraceCore artifacts."""
    out = tmp_path / "export"
    result = rig_cli(five_rig, "evidence", "export", "--format", "tracecore", "--all", "--out", str(out), "--json")
    assert result.code == 0, result.err
    assert result.json()["skipped"] == []
    return out


@pytest.mark.process
@pytest.mark.timeout(240)  # the first run installs tracecore into .cache/
def test_tracecores_own_verifier_passes_every_way_an_attempt_ends(
    five: dict[str, TaskAttempt], exported: Path, tracecore: Path, tmp_path: Path
) -> None:
    out = exported
    home = tmp_path / "tracecore-home"
    home.mkdir()
    for kind, attempt in five.items():
        path = out / f"{attempt.attempt_id}.json"
        artifact = json.loads(path.read_text())
        checked = subprocess.run(
            [str(tracecore), "verify", "--run", str(path), "--strict-spec", "--json"],
            capture_output=True,
            text=True,
            cwd=home,
            env={"HOME": str(home), "PATH": os.environ["PATH"]},
            timeout=60,
        )
        assert checked.returncode == 0, f"{kind}: {checked.stdout}{checked.stderr}"
        assert json.loads(checked.stdout)["checks"]["strict_spec"]["ok"] is True
        assert artifact["artifact_hash"] == stable_hash(artifact), kind
        assert ulid_of_uuid(artifact["run_id"]) == attempt.attempt_id
        assert artifact["success"] is (kind == "completed")
    failure_types = {
        kind: json.loads((out / f"{a.attempt_id}.json").read_text())["failure_type"] for kind, a in five.items()
    }
    assert failure_types == {
        "completed": None,
        "failed": "logic_failure",
        "timed_out": "timeout",
        "canceled": "non_termination",
        "swept": "non_termination",
    }


@pytest.mark.process
@pytest.mark.timeout(240)
def test_the_hash_is_the_one_tracecores_own_code_computes(exported: Path, tracecore: Path) -> None:
    out = exported
    recompute = (
        "import json, sys\n"
        "from agent_bench.runner.runner import _inject_artifact_hash\n"
        "for path in sys.argv[1:]:\n"
        "    artifact = json.load(open(path))\n"
        "    claimed = artifact.pop('artifact_hash')\n"
        "    print(claimed == _inject_artifact_hash(artifact)['artifact_hash'])\n"
    )
    paths = sorted(str(p) for p in out.iterdir())
    python = tracecore.parent / "python"
    checked = subprocess.run([str(python), "-c", recompute, *paths], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
    assert len(paths) == 6  # the swept task ran again
    assert checked.stdout.split() == ["True"] * len(paths)


async def one_run(rig: Rig, payload: dict[str, Any]) -> tuple[str, str]:
    """(the manifest's artifact_hash, the TraceCore artifact's) of one script task run to its end."""
    task = rig.add("scripted", subject="same work", payload=payload)
    await run_until_idle(rig)
    [attempt] = rig.store.attempts_of(task.task_id)
    manifest = json.loads((Path(attempt.evidence_dir or "") / "manifest.json").read_text())
    out = Path(attempt.evidence_dir or "").parent.parent.parent.parent / f"tc-{task.task_id}"
    export = ["evidence", "export", "--format", "tracecore", "--task", str(task.task_id), "--out", str(out)]
    assert main(["--config", str(rig.config.path), *export]) == 0
    artifact = json.loads((out / f"{attempt.attempt_id}.json").read_text())
    return manifest["artifact_hash"], artifact["artifact_hash"]


@pytest.mark.process
@pytest.mark.asyncio
async def test_two_runs_of_the_same_work_share_an_artifact_hash_and_other_payloads_do_not(
    rig: Rig, capsys: pytest.CaptureFixture[str]
) -> None:
    same = {"stdout": "the same output", "outcome": ok()}
    first = await one_run(rig, same)
    rig.clock.advance(3600)
    second = await one_run(rig, same)
    other = await one_run(rig, {**same, "stdout": "the same output", "note": "another payload"})
    assert first == second
    assert other[0] != first[0] and other[1] != first[1]


@pytest.mark.process
@pytest.mark.asyncio
async def test_the_bundle_holds_the_index_the_head_and_every_attempt_folder(
    five_rig: Rig, five: dict[str, TaskAttempt], rig_cli: Any, tmp_path: Path
) -> None:
    out = tmp_path / "evidence.tar.gz"
    assert rig_cli(five_rig, "evidence", "export", "--format", "bundle", "--all", "--out", str(out)).code == 0
    head = five_rig.store.chain_head()
    assert head is not None
    with tarfile.open(out) as tar:
        names = set(tar.getnames())
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        chain_head = tar.extractfile("chain_head").read().decode()  # type: ignore[union-attr]
    assert chain_head == f"{head[0]}:{head[1]}\n"
    assert index["chain_head"] == {"sequence": head[0], "hash": head[1]}
    attempts = {a.attempt_id for a in five_rig.store.all_attempts()}
    assert {entry["attempt_id"] for entry in index["attempts"]} == attempts
    for entry in index["attempts"]:
        folder = entry["folder"]
        assert {f"{folder}/manifest.json", f"{folder}/action_trace.jsonl", entry["tracecore"]} <= names
        assert not any(name.startswith(f"{folder}/scratch") for name in names)
    swept = five["swept"]
    assert f"attempts/{swept.task_id}/{swept.attempt_id}/manifest.json" in names


@pytest.mark.asyncio
async def test_export_refuses_an_existing_target_and_an_unknown_task_writing_nothing(
    rig: Rig, rig_cli: Any, tmp_path: Path
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    refused = rig_cli(rig, "evidence", "export", "--format", "tracecore", "--all", "--out", str(taken))
    assert refused.code == 2 and f"{taken} already exists" in refused.err
    unknown = rig_cli(
        rig, "evidence", "export", "--format", "bundle", "--task", "404", "--out", str(tmp_path / "b.tgz")
    )
    assert unknown.code == 2 and "task 404 does not exist" in unknown.err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert list(taken.iterdir()) == []


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_a_ulid_and_its_uuid_are_the_same_128_bits(value: int) -> None:
    crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    ulid = "".join(crockford[(value >> (5 * i)) & 31] for i in reversed(range(26)))
    as_uuid = uuid_of_ulid(ulid)
    assert int(as_uuid.replace("-", ""), 16) == value
    assert ulid_of_uuid(as_uuid) == ulid
