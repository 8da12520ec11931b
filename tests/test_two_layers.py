"""Two layers decide a tool call (issue 52, finding 1; docs/policy.md "Two layers"): when agentd's policy allowed a
call and the harness's own permissions refused it, the `policy_denied` event says so (`refused_by`, `agentd_decision`)
and `agentd task show` says it in words; a call agentd refused is `tool_call_denied`, `refused_by: agentd`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from markupsafe import escape
from rig import Rig
from support import CliResult
from test_policy_denials import DeniedClaude, denied_rig  # noqa: F401  (the fixture, used by name)
from test_web_console import logged_in
from webrig import serving

from agentd.adapters.base import AdapterRun, AttemptContext, OnStarted
from agentd.outlook.denials import denials_line
from agentd.records import AdapterConfig
from agentd.services.dispatch import Dispatcher


class AllowedThenRefused(DeniedClaude):
    """agentd's policy allowed `toolu_0` (as its hook records a decision), then claude's own check refused both."""

    def __init__(self, adapter_id: str, rig: Rig) -> None:
        super().__init__(adapter_id)
        self.rig = rig

    async def execute(self, ctx: AttemptContext, on_started: OnStarted) -> AdapterRun:
        decided = {"tool": "Bash", "summary": "echo one", "rule": "default: allow", "tool_use_id": "toolu_0"}
        self.rig.store.record_call(ctx.task.task_id, ctx.attempt_id, True, decided, self.rig.clock.now())
        return await super().execute(ctx, on_started)


async def allowed_then_refused(rig: Rig) -> int:
    """One task whose attempt's harness refused two calls, the first after agentd's policy allowed it."""
    task = rig.add("scripted", payload={"commands": ["echo one", "echo two"]})

    def adapters(config: AdapterConfig) -> AllowedThenRefused:
        return AllowedThenRefused(config.adapter_id, rig)

    dispatcher = Dispatcher(rig.config, rig.db, clock=rig.clock, adapters=adapters)
    await dispatcher.start()
    await dispatcher.claim_and_run(rig.clock.now())
    await dispatcher.stop()
    return task.task_id


BOTH_LAYERS = "denials: 2 tool calls refused by the harness, 1 after agentd's policy allowed it (Bash)"


@pytest.mark.asyncio
async def test_a_call_agentd_allowed_and_the_harness_refused_names_both_layers(
    denied_rig: Rig,  # noqa: F811
    rig_cli: Callable[..., CliResult],
) -> None:
    task_id = await allowed_then_refused(denied_rig)
    events = denied_rig.events(task_id)
    [allowed] = [e.payload for e in events if e.type == "tool_call_allowed"]
    assert "refused_by" not in allowed
    refused = [e.payload for e in events if e.type == "policy_denied"]
    assert [(p["call_id"], p["refused_by"], p.get("agentd_decision")) for p in refused] == [
        ("toolu_0", "harness", "allowed"),
        ("toolu_1", "harness", None),
    ]
    shown = rig_cli(denied_rig, "task", "show", str(task_id))
    assert BOTH_LAYERS in shown.out


@pytest.mark.asyncio
async def test_the_console_s_task_page_says_it_in_the_same_words(denied_rig: Rig) -> None:  # noqa: F811
    task_id = await allowed_then_refused(denied_rig)
    with serving(denied_rig) as web:
        browser, _ = logged_in(web)
        page = await anyio.to_thread.run_sync(browser.get, f"/tasks/{task_id}")
    assert page.status == 200
    assert f'<p class="denials">{escape(BOTH_LAYERS)}</p>' in page.text, page.text[:3000]


def test_a_call_agentd_s_policy_denied_says_agentd_refused_it(rig: Rig) -> None:
    task = rig.add("scripted", payload={})
    decided = {"tool": "Bash", "summary": "git push -f", "rule": "deny: rule 1 ([policy])"}
    rig.store.record_call(task.task_id, "01ATTEMPT", False, decided, rig.clock.now())
    [denied] = [e.payload for e in rig.events(task.task_id) if e.type == "tool_call_denied"]
    assert denied["refused_by"] == "agentd"


@pytest.mark.parametrize(
    ("denials", "line"),
    [
        ([{"tool": "Write"}], "denials: 1 tool call refused by the harness (Write)"),
        ([{"tool": "Write", "agentd_decision": "allowed"}],
         "denials: 1 tool call refused by the harness, after agentd's policy allowed it (Write)"),
        ([{"tool": "Bash", "agentd_decision": "allowed"}, {"tool": "Write"}, {"dropped": 3}],
         "denials: 5 tool calls refused by the harness, 1 after agentd's policy allowed it (Bash, Write)"),
    ],
)  # fmt: skip
def test_the_denials_line_says_which_layer_decided_what(denials: list[dict[str, Any]], line: str) -> None:
    assert denials_line(denials) == line
