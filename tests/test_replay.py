"""`agentd replay` on real attempts the real dispatcher ran: identical when nothing changed (secrets
and scratch paths included), each change named, tampered evidence never re-run, model attempts
refused with their reason, and a read-only copy of the state dir left exactly as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from rig import Rig
from support import CliResult, tree

from agentd.attempt.replay import json_differences, result_differences, text_difference
from agentd.cli import main
from agentd.evidence import MANIFEST, artifact_hash
from agentd.records import TaskAttempt

SECRET = "s3cret-token-value"
SCRIPT = """#!/bin/sh
echo "hello task $AGENTD_TASK_ID attempt $AGENTD_ATTEMPT_ID args $*"
echo "payload $(cat)"
echo "token $REPLAY_TOKEN"
echo "result at $AGENTD_RESULT_PATH, home $HOME, in $(pwd)"
echo "a warning" >&2
echo run >> {runs}
printf '{{"status":"completed","machine_status":"ok","operator_summary":"said %s"}}' "{word}" > "$AGENTD_RESULT_PATH"
"""


def write_script(path: Path, *, word: str = "hello") -> None:
    path.write_text(SCRIPT.format(runs=path.parent / "runs.txt", word=word))
    path.chmod(0o755)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "agent.sh"
    write_script(path)
    return path


@pytest.fixture
def replay_rig(rig_factory: Callable[..., Rig], script: Path, tmp_path: Path) -> Rig:
    """The test agent plus `replayable` (the script above, a secret in its env_file) and `modelish`
    (a claude-code adapter: attempts that call a model)."""
    env_file = tmp_path / "replay.env"
    env_file.write_text(f"REPLAY_TOKEN={SECRET}\n")
    env_file.chmod(0o600)

    def add(raw: dict[str, Any]) -> None:
        raw["adapters"] += [
            {
                "adapter_id": "replayable",
                "kind": "script",
                "command": str(script),
                "extra_args": ["--from-config"],
                "env_file": str(env_file),
                "timeout_ms": 30_000,
            },
            {"adapter_id": "modelish", "kind": "claude-code", "command": "claude", "timeout_ms": 30_000},
        ]

    return rig_factory(add)


async def run_one(rig: Rig, adapter_id: str, *, processes: bool) -> TaskAttempt:
    task = rig.add("scripted", subject="replay me", payload={"n": 1}, requested_adapter_id=adapter_id)
    dispatcher = rig.dispatcher(processes=processes)
    await dispatcher.start()
    await dispatcher.run_until_idle()
    (attempt,) = rig.store.attempts_of(task.task_id)
    assert attempt.ended_at is not None and attempt.exit_status == "ok", attempt
    return attempt


@pytest_asyncio.fixture
async def ran(replay_rig: Rig) -> TaskAttempt:
    return await run_one(replay_rig, "replayable", processes=True)


@pytest.fixture
def replay(rig_cli: Callable[..., CliResult]) -> Callable[..., CliResult]:
    def run(rig: Rig, *args: str, state_dir: Path | None = None) -> CliResult:
        return rig_cli(rig, "replay", *args, state_dir=state_dir)

    return run


def evidence_dir(rig: Rig, attempt: TaskAttempt) -> Path:
    return rig.config.paths.state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id


def runs(script: Path) -> int:
    return len((script.parent / "runs.txt").read_text().splitlines())


def reseal(rig: Rig, root: Path, change: Callable[[dict[str, Any]], None], *, record: bool = True) -> None:
    """Rewrite the sealed manifest as another agentd would have written it (the artifact_hash kept
    true), and with `record` its sha256 in the attempt's event, as that agentd would have."""
    path = root / MANIFEST
    manifest = json.loads(path.read_text())
    change(manifest)
    manifest["artifact_hash"] = artifact_hash(manifest)
    path.chmod(0o600)
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    path.write_text(text)
    if record:
        with sqlite3.connect(rig.config.db_path) as conn:
            conn.execute(
                """UPDATE events SET payload = json_set(payload, '$.manifest_sha256', ?)
                   WHERE type = 'task_attempt_finished' AND attempt_id = ?""",
                (hashlib.sha256(text.encode()).hexdigest(), root.name),
            )


@pytest.mark.process
def test_an_unchanged_script_attempt_replays_identical(
    replay_rig: Rig, ran: TaskAttempt, replay: Any, script: Path
) -> None:
    stdout = (evidence_dir(replay_rig, ran) / "stdout.log").read_text()
    assert "token [redacted]" in stdout and SECRET not in stdout  # the secret is in play, and was redacted
    assert f"result at {replay_rig.config.paths.runs / ran.attempt_id}/result.json" in stdout  # so are its paths
    result = replay(replay_rig, ran.attempt_id)
    assert result.code == 0, result.out + result.err
    assert result.out == f"identical: attempt {ran.attempt_id}\n"
    assert runs(script) == 2  # it really ran again
    shown = replay(replay_rig, ran.attempt_id, "--json").json()
    assert shown == verdict("identical", ran.attempt_id)


@pytest.mark.process
def test_an_older_manifest_without_argv_runs_todays_command_and_says_so(
    replay_rig: Rig, ran: TaskAttempt, replay: Any, script: Path
) -> None:
    def forget(manifest: dict[str, Any]) -> None:
        del manifest["adapter"]["argv"], manifest["adapter"]["command_sha256"]

    reseal(replay_rig, evidence_dir(replay_rig, ran), forget)
    result = replay(replay_rig, ran.attempt_id)
    assert result.code == 0, result.out + result.err
    assert result.out.splitlines() == [
        "note: the manifest records no argv (an older attempt): ran today's configured command "
        f"['{script}', '--from-config']",
        f"identical: attempt {ran.attempt_id}",
    ]


@pytest.mark.process
def test_a_changed_script_is_different_and_names_the_command_stdout_and_the_result(
    replay_rig: Rig, ran: TaskAttempt, replay: Any, script: Path
) -> None:
    sealed_sha = hashlib.sha256(script.read_bytes()).hexdigest()
    write_script(script, word="goodbye")
    script.write_text(script.read_text().replace('echo "hello task', 'echo "goodbye task'))
    root = evidence_dir(replay_rig, ran)
    result = replay(replay_rig, ran.attempt_id)
    assert result.code == 1
    lines = result.out.splitlines()
    assert (
        lines[0] == f"{script}: command: expected {sealed_sha}, found {hashlib.sha256(script.read_bytes()).hexdigest()}"
    )
    assert lines[1].startswith(f"{root}/stdout.log:1: stdout.log: expected hello task ")
    assert ", found goodbye task " in lines[1] and lines[1].endswith("\\x0a")
    assert (
        lines[2] == f'{root}/result.json: result.json $.operator_summary: expected "said hello", found "said goodbye"'
    )
    assert lines[3:] == [
        f"different: attempt {ran.attempt_id}: 3 difference(s)",
        f"finding: non_deterministic: attempt {ran.attempt_id} did not do the same again (TraceCore failure_type, "
        "seed 001 §4.6)",
    ]
    shown = replay(replay_rig, ran.attempt_id, "--json").json()
    assert shown["verdict"] == "different"
    assert shown["finding"] == {
        "failure_type": "non_deterministic",
        "spec_version": "tracecore-spec-v1.0",
        "attempt_id": ran.attempt_id,
        "differences": 3,
    }
    assert [(d["what"], d["where"]) for d in shown["differences"]] == [
        ("command", str(script)),
        ("stdout.log", f"{root}/stdout.log:1"),
        ("result.json $.operator_summary", f"{root}/result.json"),
    ]
    assert shown["differences"][1]["expected"].startswith("hello task")


@pytest.mark.process
def test_a_manifest_resealed_behind_the_chains_back_is_different_and_nothing_runs(
    replay_rig: Rig, ran: TaskAttempt, replay: Any, script: Path
) -> None:
    root = evidence_dir(replay_rig, ran)

    def elsewhere(manifest: dict[str, Any]) -> None:
        manifest["adapter"]["argv"] = ["/bin/sh", "-c", "echo pwned"]

    before = runs(script)
    reseal(replay_rig, root, elsewhere, record=False)
    shown = replay(replay_rig, ran.attempt_id, "--json")
    assert shown.code == 1
    assert shown.json()["verdict"] == "different"
    [difference] = shown.json()["differences"]
    assert difference["where"] == str(root / MANIFEST)
    assert "differs from the one event" in difference["what"]
    assert runs(script) == before


@pytest.mark.process
def test_the_recorded_argv_runs_and_a_changed_command_is_named(
    replay_rig: Rig, ran: TaskAttempt, replay: Any, script: Path
) -> None:
    root = evidence_dir(replay_rig, ran)
    sealed_sha = hashlib.sha256(script.read_bytes()).hexdigest()

    def record(manifest: dict[str, Any]) -> None:
        manifest["adapter"].update(argv=[str(script), "--recorded"], command_sha256=sealed_sha)

    reseal(replay_rig, root, record)
    script.write_text(script.read_text() + "# edited\n")
    shown = replay(replay_rig, ran.attempt_id, "--json")
    assert shown.code == 1
    differences = shown.json()["differences"]
    assert differences[0] == {
        "what": "command",
        "where": str(script),
        "expected": sealed_sha,
        "found": hashlib.sha256(script.read_bytes()).hexdigest(),
    }
    stdout = differences[1]
    assert stdout["what"] == "stdout.log" and stdout["expected"].endswith("args --from-config\\x0a")
    assert stdout["found"].endswith("args --recorded\\x0a")  # the manifest's argv, not today's config
    assert shown.json()["notes"] == []


@pytest.mark.process
def test_tampered_evidence_is_different_and_nothing_runs(
    replay_rig: Rig, ran: TaskAttempt, replay: Any, script: Path
) -> None:
    stdout = evidence_dir(replay_rig, ran) / "stdout.log"
    stdout.write_text(stdout.read_text() + "one more line\n")
    result = replay(replay_rig, ran.attempt_id)
    assert result.code == 1
    assert result.out.splitlines() == [
        f"{stdout}: sha256 differs from the manifest (edited after the attempt)",
        f"different: attempt {ran.attempt_id}: 1 difference(s)",
    ]
    assert replay(replay_rig, ran.attempt_id, "--json").json()["finding"] is None, "the evidence, not the run, differs"
    assert runs(script) == 1


@pytest.mark.process
def test_whatever_evidence_verify_finds_makes_a_replay_different_and_nothing_runs(
    replay_rig: Rig, ran: TaskAttempt, replay: Any, script: Path, tmp_path: Path
) -> None:
    """One check for both (issue 23, 9f): an extra file, a link and a special file in the folder, each of
    which `evidence verify` reports, stop a replay as they stop verify."""
    root = evidence_dir(replay_rig, ran)
    (root / "planted.sh").write_text("echo hi\n")
    verified = main(["--config", str(replay_rig.config.path), "evidence", "verify"])
    result = replay(replay_rig, ran.attempt_id)
    assert verified == 1 and result.code == 1
    assert result.out.splitlines() == [
        f"{root / 'planted.sh'}: present but not part of the evidence",
        f"different: attempt {ran.attempt_id}: 1 difference(s)",
    ]
    (root / "planted.sh").unlink()
    stdin = root / "stdin.json"
    shutil.copyfile(stdin, tmp_path / "stdin-copy.json")
    stdin.chmod(0o600)
    stdin.unlink()
    stdin.symlink_to(tmp_path / "stdin-copy.json")  # the same bytes, through a link
    os.mkfifo(root / "planted.fifo")
    shown = replay(replay_rig, ran.attempt_id, "--json").json()
    assert shown["verdict"] == "different"
    assert {(d["where"], d["what"]) for d in shown["differences"]} >= {
        (str(stdin), "a symbolic link (never followed)"),
        (str(root / "planted.fifo"), "not a regular file (never read)"),
    }
    assert runs(script) == 1  # nothing ran again


@pytest.mark.asyncio
async def test_a_model_attempt_is_not_replayable(replay_rig: Rig, replay: Any) -> None:
    attempt = await run_one(replay_rig, "modelish", processes=False)
    result = replay(replay_rig, attempt.attempt_id)
    assert result.code == 1
    reason = "claude-code attempts call a model; a second call is not expected to reproduce the first"
    assert result.out == f"not_replayable: attempt {attempt.attempt_id}: {reason}\n"
    shown = replay(replay_rig, attempt.attempt_id, "--json").json()
    assert shown == verdict("not_replayable", attempt.attempt_id, reason)


def test_an_unknown_attempt_is_bad_input(replay_rig: Rig, replay: Any) -> None:
    result = replay(replay_rig, "01JNOSUCHATTEMPT0000000000")
    assert result.code == 2 and result.out == ""
    assert result.err == (
        f"agentd: no attempt '01JNOSUCHATTEMPT0000000000' in {replay_rig.config.db_path}; "
        "`agentd task show ID` lists a task's attempts\n"
    )


@pytest.mark.parametrize(
    ("column", "says"),
    [("ended_at", "is still running; replay it once it has ended"), ("evidence_pruned_at", "was pruned at")],
)
@pytest.mark.asyncio
async def test_a_running_or_pruned_attempt_is_bad_input(replay_rig: Rig, replay: Any, column: str, says: str) -> None:
    attempt = await run_one(replay_rig, "script", processes=False)
    value = None if column == "ended_at" else "2026-01-01T00:00:00.000Z"
    with sqlite3.connect(replay_rig.config.db_path) as conn:
        conn.execute(f"UPDATE task_attempts SET {column} = ? WHERE attempt_id = ?", (value, attempt.attempt_id))
    result = replay(replay_rig, attempt.attempt_id)
    assert result.code == 2 and len(result.err.splitlines()) == 1
    assert attempt.attempt_id in result.err and says in result.err


def verdict(said: str, attempt_id: str, reason: str | None = None) -> dict[str, Any]:
    """`replay --json`'s answer when it found no difference, note or finding."""
    return {
        "verdict": said,
        "attempt_id": attempt_id,
        "reason": reason,
        "differences": [],
        "notes": [],
        "finding": None,
    }


@pytest.mark.process
def test_a_read_only_copy_replays_and_is_not_changed(
    replay_rig: Rig, ran: TaskAttempt, replay: Any, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(replay_rig.config.paths.state_dir, copy)
    listing = sorted(str(p.relative_to(copy)) for p in copy.rglob("*"))
    before = tree(copy)
    for path in copy.rglob("*"):
        os.chmod(path, 0o500 if path.is_dir() else 0o400)
    os.chmod(copy, 0o500)
    try:
        result = replay(replay_rig, ran.attempt_id, state_dir=copy)
    finally:
        for path in [copy, *copy.rglob("*")]:
            os.chmod(path, 0o700 if path.is_dir() else 0o600)
    assert result.code == 0, result.out + result.err
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == listing
    assert tree(copy) == before


def test_result_json_is_compared_field_by_field_and_text_otherwise(tmp_path: Path) -> None:
    where = tmp_path / "result.json"
    old = {"status": "completed", "items": [1, 2], "odd key": True, "gone": 1}
    new = {"status": "blocked", "items": [1, 2.0, 3], "odd key": True, "extra": None}
    assert json_differences(old, new) == [
        ("$.extra", None, "null"),
        ("$.gone", "1", None),
        ("$.items[1]", "2", "2.0"),
        ("$.items[2]", None, "3"),
        ("$.status", '"completed"', '"blocked"'),
    ]
    assert json_differences(old, {**old}) == []
    assert json_differences({"odd key": 1}, {"odd key": 2}) == [('$["odd key"]', "1", "2")]
    (text,) = result_differences(where, b"not json\nsame\n", b"not json\nother\n")
    assert (text.what, text.where, text.expected, text.found) == (
        "result.json",
        f"{where}:2",
        "same\\x0a",
        "other\\x0a",
    )
    (missing,) = result_differences(where, None, b'{"a": 1}')
    assert (missing.expected, missing.found) == (None, '{"a": 1}')
    assert result_differences(where, None, None) == []


def test_a_long_or_shorter_output_is_cut_and_its_end_named(tmp_path: Path) -> None:
    where = tmp_path / "stdout.log"
    long = text_difference("stdout.log", where, b"a\n" + b"x" * 500 + b"\n", b"a\n" + b"y" * 500 + b"\n")
    assert long is not None and long.where == f"{where}:2" and long.expected == "x" * 200 + "…"
    shorter = text_difference("stdout.log", where, b"a\nb\n", b"a\n")
    assert shorter is not None and (shorter.expected, shorter.found) == ("b\\x0a", "(end of file)")
    escaped = text_difference("stdout.log", where, b"\x1b[31mred\n", b"plain\n")
    assert escaped is not None and escaped.expected == "\\x1b[31mred\\x0a"
    assert text_difference("stdout.log", where, b"same", b"same") is None


def script_rig(rig_factory: Callable[..., Rig], folder: Path, adapter_id: str, body: str, **dispatch: Any) -> Rig:
    """The test agent plus a script adapter `adapter_id` that runs `body` (sh) and then completes."""
    script = folder / f"{adapter_id}.sh"
    script.write_text(
        f"#!/bin/sh\n{body}\n"
        f"""printf '{{"status":"completed","machine_status":"ok","operator_summary":"{adapter_id}"}}' """
        '> "$AGENTD_RESULT_PATH"\n'
    )
    script.chmod(0o755)

    def add(raw: dict[str, Any]) -> None:
        raw["dispatch"].update(dispatch)
        raw["adapters"].append(
            {"adapter_id": adapter_id, "kind": "script", "command": str(script), "timeout_ms": 30_000}
        )

    return rig_factory(add)


@pytest.fixture
def long_rig(rig_factory: Callable[..., Rig], tmp_path: Path) -> Rig:
    """An agent whose `long` script prints more than its 1 KiB output cap."""
    return script_rig(rig_factory, tmp_path, "long", "seq 1 3000", output_cap_bytes=1024)


@pytest_asyncio.fixture
async def long_ran(long_rig: Rig) -> TaskAttempt:
    return await run_one(long_rig, "long", processes=True)


@pytest.mark.process
def test_an_attempt_whose_output_passed_the_cap_replays_identical(
    long_rig: Rig, long_ran: TaskAttempt, replay: Any
) -> None:
    """The attempt kept its output's head and tail (docs/evidence.md, "The attempt folder"); the replay keeps the
    same."""
    stdout = (evidence_dir(long_rig, long_ran) / "stdout.log").read_text()
    assert stdout.startswith("1\n2\n") and stdout.endswith("\n3000\n") and "output capped at 1024" in stdout
    result = replay(long_rig, long_ran.attempt_id)
    assert result.code == 0 and result.out == f"identical: attempt {long_ran.attempt_id}\n", result.out + result.err


@pytest.mark.parametrize("depth", [900, 100_000], ids=["past the walk's reach", "past json's reach"])
def test_result_files_nested_past_what_python_walks_are_compared_as_text(tmp_path: Path, depth: int) -> None:
    """A result.json is what the attempt wrote: however deep, replay reports the difference, never raises."""
    expected = b'{"a": ' * depth + b"1" + b"}" * depth
    found = expected.replace(b"1", b"2", 1)
    [difference] = result_differences(tmp_path / "result.json", expected, found)
    assert difference.what == "result.json", difference


@pytest.fixture
def nesting_rig(rig_factory: Callable[..., Rig], tmp_path: Path) -> Rig:
    """An agent whose `nests` adapter leaves 3,000 folders one in another in its HOME."""
    nest = "import os\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\n"
    return script_rig(rig_factory, tmp_path, "nests", f'cd "$HOME"\npython3 -c "{nest}"')


@pytest_asyncio.fixture
async def nested(nesting_rig: Rig) -> TaskAttempt:
    return await run_one(nesting_rig, "nests", processes=True)


@pytest.mark.process
def test_a_replay_that_leaves_a_tree_deeper_than_python_recurses_cleans_up_and_says_its_verdict(
    nesting_rig: Rig, nested: TaskAttempt, replay: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay's scratch went with TemporaryDirectory's cleanup, which recurses once per level: a
    command that left 3,000 folders one in another ended `agentd replay` in a RecursionError traceback."""
    assert list(nesting_rig.config.paths.runs.iterdir()) == [], "the attempt's own run dir went when it ended"
    scratch_parent = tmp_path / "tmp"
    scratch_parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_parent))  # where the replay makes its scratch
    result = replay(nesting_rig, nested.attempt_id)
    assert result.code == 0, result.out + result.err
    assert result.out == f"identical: attempt {nested.attempt_id}\n"
    assert list(scratch_parent.iterdir()) == [], "the scratch is gone, however deep"


@pytest.mark.process
def test_a_task_number_replays_its_last_finished_attempt_and_says_which(
    replay_rig: Rig, ran: TaskAttempt, replay: Any
) -> None:
    """`agentd replay 17` (issue 52): the task's last finished attempt, named on the first line."""
    result = replay(replay_rig, str(ran.task_id))
    assert result.code == 0, result.out + result.err
    assert result.out.splitlines() == [
        f"note: replaying task {ran.task_id}'s last finished attempt: attempt 1, {ran.attempt_id} "
        "(name another by its id)",
        f"identical: attempt {ran.attempt_id}",
    ]
    shown = replay(replay_rig, str(ran.task_id), "--json").json()
    assert shown["attempt_id"] == ran.attempt_id and shown["chosen"].startswith(f"replaying task {ran.task_id}'s")


@pytest.mark.process
def test_a_task_with_no_finished_attempt_or_no_task_is_bad_input(replay_rig: Rig, replay: Any) -> None:
    waiting = replay_rig.add("example")
    result = replay(replay_rig, str(waiting.task_id))
    assert result.code == 2 and result.out == ""
    assert f"task {waiting.task_id} has no finished attempt to replay" in result.err
    missing = replay(replay_rig, "4242")
    assert missing.code == 2 and "4242" in missing.err and "Traceback" not in missing.err
