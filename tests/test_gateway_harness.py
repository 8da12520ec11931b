"""The real harness CLIs through the model gateway (`make test-harness`, inside tests/harness/isolated.sh): the
pinned claude and codex, given the gateway's address and the attempt's token as their API key, in front of the
loopback fake model. The fake sees the real key and never the token; what the gateway records is what the fake
answered, and what the CLI itself reports agrees."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakemodel import FakeModelServer, Reply
from gatewayrig import KEY, TOKEN, Recorder, admit, serving
from harness.record import Clis, Scratch, base_env, codex_config
from harness.scenarios import OK, PROMPT
from support import REPO

from agentd.usage import Usage

pytestmark = [pytest.mark.harness, pytest.mark.process, pytest.mark.asyncio, pytest.mark.timeout(180)]

CLIS = Clis(Path(os.environ.get("AGENTD_HARNESS_CACHE") or REPO / ".cache" / "harness"))
TURN = Reply(OK, input_tokens=31, output_tokens=9, cache_read_tokens=5, cache_write_tokens=2)
RUN_S = 120


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    with FakeModelServer(turns=[TURN]) as server:
        yield server


def installed(cli: str) -> str:
    command = CLIS.command(cli)
    if not os.access(command, os.X_OK):
        pytest.fail(f"{command} is not installed: `make test-harness` installs the pinned CLIs first")
    return str(command)


async def run(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """The CLI in its own session, the prompt on its stdin; its whole group killed if it outlives RUN_S."""
    child = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, start_new_session=True,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(child.communicate(PROMPT.encode()), RUN_S)
    except TimeoutError:
        os.killpg(child.pid, signal.SIGKILL)
        await child.wait()
        raise
    assert child.returncode == 0, (out + err).decode("utf-8", "replace")[-3000:]
    return child.returncode, out.decode()


def the_fake_saw_only_the_key(fake: FakeModelServer, header: str, value: str) -> None:
    calls = [request for request in fake.requests if request.turn is not None]
    assert calls, [(r.method, r.path) for r in fake.requests]
    for request in fake.requests:
        assert TOKEN not in json.dumps(request.headers) + request.path + request.query
    assert {request.headers.get(header) for request in calls} == {value}


def model_records(hooks: Recorder, api: str) -> list[Usage]:
    return [record.metered.usage for record in hooks.records if record.call.api == api]


async def test_the_real_claude_cli_calls_through_the_gateway(fake: FakeModelServer, tmp_path: Path) -> None:
    claude = installed("claude")
    scratch = Scratch(tmp_path / "claude")
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url, "x-api-key")
        env = base_env(CLIS, "claude", scratch) | {
            "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": TOKEN, "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "CLAUDE_CODE_MAX_RETRIES": "0", "API_TIMEOUT_MS": "20000",
        }  # fmt: skip
        argv = [claude, "-p", "--no-session-persistence", "--output-format", "json", "--model", "claude-sonnet-4-5"]
        _, out = await run(argv, scratch["work"], env)
        await hooks.record(len(fake.requests))
    result = json.loads(out)
    assert result["is_error"] is False and result["result"] == OK
    assert gateway.refused == 0  # its `HEAD /` warm-up carries no key: answered 401, not counted
    the_fake_saw_only_the_key(fake, "x-api-key", KEY)
    assert model_records(hooks, "anthropic") == [Usage(31, 9, 5, 2)]
    reported = result["usage"]  # and claude's own account of the same call agrees
    assert (reported["input_tokens"], reported["output_tokens"]) == (31, 9)
    assert (reported["cache_read_input_tokens"], reported["cache_creation_input_tokens"]) == (5, 2)


async def test_the_real_codex_cli_calls_through_the_gateway(fake: FakeModelServer, tmp_path: Path) -> None:
    codex = installed("codex")
    scratch = Scratch(tmp_path / "codex")
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url, "bearer")
        (scratch["cli"] / "config.toml").write_text(codex_config(url, {}))  # base_url = the gateway + "/v1"
        env = base_env(CLIS, "codex", scratch) | {"CODEX_HOME": str(scratch["cli"]), "FAKE_MODEL_API_KEY": TOKEN}
        argv = [codex, "exec", "--json", "--skip-git-repo-check", "--ephemeral", "-m", "gpt-5.5", "-"]
        _, out = await run(argv, scratch["work"], env)
        await hooks.record(len(fake.requests))
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    [completed] = [event for event in events if event.get("type") == "turn.completed"]
    the_fake_saw_only_the_key(fake, "authorization", f"Bearer {KEY}")
    assert model_records(hooks, "responses") == [Usage(31, 9, 5, None)]
    assert (completed["usage"]["input_tokens"], completed["usage"]["output_tokens"]) == (31, 9)
    assert completed["usage"]["cached_input_tokens"] == 5


async def test_the_real_hermes_cli_calls_through_the_gateway(fake: FakeModelServer, tmp_path: Path) -> None:
    hermes = installed("hermes")
    scratch = Scratch(tmp_path / "hermes")
    usage_file = scratch["cli"] / "usage.json"
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url, "bearer")
        config = {
            "model": {"provider": "custom", "default": "fake-model", "context_length": 262144,
                      "base_url": f"{url}/v1", "api_key": TOKEN},
            "security": {"allow_lazy_installs": False},
            "agent": {"api_max_retries": 1},
        }  # fmt: skip
        (scratch["cli"] / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
        env = base_env(CLIS, "hermes", scratch) | {
            "HERMES_HOME": str(scratch["cli"]), "HERMES_DISABLE_LAZY_INSTALLS": "1", "HERMES_API_TIMEOUT": "20",
            "HERMES_STREAM_READ_TIMEOUT": "20", "HERMES_STREAM_STALE_TIMEOUT": "20", "HERMES_STREAM_RETRIES": "0",
        }  # fmt: skip
        await run([hermes, "-z", PROMPT, "--usage-file", str(usage_file)], scratch["work"], env)
        await hooks.record(len(fake.requests))
    reported = json.loads(usage_file.read_text())
    assert reported["completed"] is True and reported["failed"] is False
    the_fake_saw_only_the_key(fake, "authorization", f"Bearer {KEY}")
    assert model_records(hooks, "chat") == [Usage(31, 9, 5, None)]  # it asks for the stream's usage
    # hermes counts the cached tokens apart from the input, where OpenAI's input counts them: the same call
    assert (reported["input_tokens"] + reported["cache_read_tokens"], reported["output_tokens"]) == (31, 9)
    assert reported["cache_read_tokens"] == 5
