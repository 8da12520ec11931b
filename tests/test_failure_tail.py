"""A failed attempt shows its cause where the operator looks (issue 40, finding 3): `agentd task show`, the
console's task page and the API give the last lines the adapter wrote to stderr (redacted, as sealed in its
evidence, and bounded), and a missing outcome is said in the words of the adapter's kind."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from support import with_env_file
from test_redaction_forms import SECRET, env_file
from test_web_console import logged_in
from webrig import serving

from agentd.attempt.outcome import extract_outcome
from agentd.edge import TAIL_LINES, TAIL_WIDTH

NOISE = [f"noise line {n}" for n in range(500)]
CAUSE = "FileNotFoundError: [Errno 2] No such file or directory: 'notes.txt'"


async def failed_script(rig_factory: Callable[..., Rig], tmp_path: Path, stderr: str) -> tuple[Rig, int]:
    """A real script attempt that writes `stderr` (its ${API_KEY} the env_file's secret) and exits 1."""
    rig = rig_factory(with_env_file(env_file(tmp_path, "scripted.env")))
    task = rig.add("scripted", payload={"stderr": stderr, "exit": 1})
    await rig.drain(processes=True)
    assert rig.store.get_task_or_raise(task.task_id).status == "retryable_failure"
    return rig, task.task_id


@pytest.mark.process
@pytest.mark.asyncio
async def test_task_show_the_api_and_the_console_give_a_failed_attempts_stderr_tail(
    rig_factory: Callable[..., Rig], tmp_path: Path, rig_cli: Callable[..., Any]
) -> None:
    stderr = "\n".join([*NOISE, "Traceback (most recent call last):", f"{CAUSE} key=${{API_KEY}}"])
    rig, task_id = await failed_script(rig_factory, tmp_path, stderr)
    said = f"{CAUSE} key=[redacted]"

    shown = rig_cli(rig, "task", "show", str(task_id))
    assert shown.code == 0 and SECRET not in shown.out
    tail = shown.out.split("stderr of attempt 1 (its last lines)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert tail[-1] == f"  {said}" and tail[-2] == "  Traceback (most recent call last):"
    assert len(tail) <= TAIL_LINES and tail[0] == f"  {NOISE[-(TAIL_LINES - 2)]}"  # the payload shows them all
    assert "no ```json block in its stdout" in shown.out, "a script has no final message: its stdout"

    with serving(rig) as web:
        [attempt] = web.client().get(f"/api/tasks/{task_id}").json()["attempts"]
        assert attempt["stderr_tail"][-1] == said and len(attempt["stderr_tail"]) <= TAIL_LINES
        browser, _ = logged_in(web)
        page = browser.get(f"/tasks/{task_id}").text
        shown_tail = html.unescape(page.split('class="stderr-tail">', 1)[1].split("</pre>", 1)[0]).splitlines()
        assert shown_tail == attempt["stderr_tail"] and SECRET not in html.unescape(page)


@pytest.mark.process
@pytest.mark.asyncio
async def test_the_tail_is_bounded_whatever_the_adapter_wrote(
    rig_factory: Callable[..., Rig], tmp_path: Path, rig_cli: Callable[..., Any]
) -> None:
    one_line = "x" * 200_000 + "\x1b[31m the end"
    rig, task_id = await failed_script(rig_factory, tmp_path, one_line)
    shown = rig_cli(rig, "task", "show", str(task_id))
    tail = shown.out.split("stderr of attempt 1 (its last lines)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(tail) == 1 and len(tail[0]) <= TAIL_WIDTH + 2 and "\x1b" not in shown.out
    assert tail[0].endswith("\\x1b[31m the end") or tail[0].endswith("\\u001b[31m the end"), tail[0][-40:]


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("script", "no result file, no ```json block in its stdout"),
        ("ollama-generate", "no ```json block in the model's answer"),
        ("claude-code", "no ```json block in the harness's final message"),
    ],
)
def test_a_missing_outcome_is_said_in_the_words_of_the_adapters_kind(kind: str, words: str) -> None:
    extracted = extract_outcome(None, "no block here", kind=kind)
    assert extracted.outcome is None and words in (extracted.problem or "")
