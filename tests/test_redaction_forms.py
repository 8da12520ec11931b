"""A secret is redacted in every form an output can carry it (issue 23, finding 3): as is, JSON-escaped,
inside a Python repr of the text or of its bytes (what exception messages quote), and as UTF-8 or
Latin-1 bytes; through every surface that reports text: a sensor's output, an adapter's, a handler's."""

from __future__ import annotations

import ast
import contextlib
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rig import Rig
from support import examples, with_env_file, write_sensor

from agentd.redaction import MARK, MIN_SECRET_CHARS, Redactor
from agentd.store import Store

SECRET = "sk-lïve-a\"bc\\def'0123456789"  # both quotes, a backslash, a non-ASCII letter Latin-1 can encode


ENCODINGS = ("utf-8", "latin-1")


def quoted(whole: str) -> list[tuple[str, Callable[[str], str]]]:
    """`whole` in each form a text can quote it, with how to read the form back: JSON (ASCII or not),
    the repr of the text, of its UTF-8 or Latin-1 bytes (as a bytes or a bytearray)."""
    forms: list[tuple[str, Callable[[str], str]]] = [
        (json.dumps(whole), json.loads),
        (json.dumps(whole, ensure_ascii=False), json.loads),
        (repr(whole), ast.literal_eval),
    ]
    for encoding in ENCODINGS:
        try:
            encoded = whole.encode(encoding)
        except UnicodeEncodeError:
            continue
        back = partial(_bytes_back, encoding=encoding)
        forms += [(repr(encoded), back), (repr(bytearray(encoded)), back)]
    return forms


def _bytes_back(text: str, encoding: str) -> str:
    literal = text.removeprefix("bytearray(").removesuffix(")")
    return bytes(ast.literal_eval(literal)).decode(encoding, "replace")


@settings(max_examples=examples(300), deadline=None)
@given(
    secret=st.text(st.characters(codec="utf-8"), min_size=MIN_SECRET_CHARS, max_size=40),
    before=st.text(st.characters(codec="utf-8"), max_size=30),
    after=st.text(st.characters(codec="utf-8"), max_size=30),
)
def test_a_secret_is_redacted_in_every_form_a_text_can_quote_it(secret: str, before: str, after: str) -> None:
    """Read back, a redacted form no longer holds the secret. (A secret that also matches across an
    escape, `000000` in `\\u00a0000000`, can leave a form that no longer reads: then nothing is read.)"""
    redactor = Redactor([secret])
    assume(secret not in MARK and MARK not in before + after)
    assert secret not in redactor.text(before + secret + after)
    for form, read_back in quoted(before + secret + after):
        redacted = redactor.text(form)
        assert redacted != form
        with contextlib.suppress(ValueError, SyntaxError):
            assert secret not in read_back(redacted), form


@settings(max_examples=examples(200), deadline=None)
@given(secret=st.text(min_size=MIN_SECRET_CHARS, max_size=40), around=st.binary(max_size=30))
def test_a_secret_is_redacted_from_bytes_in_utf_8_and_latin_1(secret: str, around: bytes) -> None:
    redactor = Redactor([secret])
    for encoding in ENCODINGS:
        try:
            encoded = secret.encode(encoding)
        except UnicodeEncodeError:
            continue
        assert encoded not in redactor.raw(around + encoded + around)


def scan(rig: Rig, secret: str) -> list[str]:
    """Every file under the state dir and every text column holding the secret in any form."""
    forms = [secret, *(form.split("'", 1)[1].rsplit("'", 1)[0] for form, _ in quoted(secret)[2:])]
    forms += [json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]]
    needles = {f.encode() for f in forms} | {secret.encode("latin-1")}
    found = [
        str(p)
        for p in rig.config.paths.state_dir.rglob("*")
        if p.is_file() and not p.name.startswith("agentd.db") and any(n in p.read_bytes() for n in needles)
    ]
    conn = rig.store._conn
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        for row in conn.execute(f"SELECT * FROM {table}").fetchall():
            if any(isinstance(v, str) and any(f in v for f in forms) for v in tuple(row)):
                found.append(f"table {table}")
    return found


def env_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text(f"TOKEN={SECRET}\nAPI_KEY={SECRET}\n")
    path.chmod(0o600)
    return path


SENSOR = """
token = os.environ["TOKEN"]
print(event("k", proposed_task={"task_type": "example", "source": "x", "subject": repr(token.encode()),
      "payload": {}}))
sys.stdout.flush()
sys.stderr.buffer.write(b"as Latin-1: " + token.encode("latin-1") + b"\\n")
print("as bytes: " + repr(token.encode()), file=sys.stderr)
sys.exit(3)
"""


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_sensor_printing_its_secret_as_bytes_or_a_repr_leaves_it_nowhere(
    sensing: Callable[[], Rig], sensors_dir: Path, tmp_path: Path
) -> None:
    write_sensor(sensors_dir, "leaky", SENSOR, env_file=str(env_file(tmp_path, "sensor.env")))
    rig = sensing()
    [report] = await rig.service.run_due(rig.clock.now())
    assert report.result == "exit 3" and "[redacted]" in (report.error or ""), report.error
    assert [t.subject for t in rig.store.list_tasks()] == ["b'[redacted]'"]
    assert scan(rig, SECRET) == []


@pytest.mark.process
@pytest.mark.asyncio
async def test_an_adapter_printing_its_secret_as_bytes_or_a_repr_leaves_it_nowhere(
    rig_factory: Callable[..., Rig], tmp_path: Path
) -> None:
    rig = rig_factory(with_env_file(env_file(tmp_path, "scripted.env")))
    shown = (
        b"latin-1 "
        + SECRET.encode("latin-1")
        + b" bytes "
        + repr(SECRET.encode()).encode()
        + b" repr "
        + repr(SECRET).encode()
    )
    task = rig.add("scripted", payload={"stdout_hex": shown.hex(), "stderr": "${API_KEY}", "exit": 3})
    await rig.drain(processes=True)
    assert rig.store.get_task_or_raise(task.task_id).status == "retryable_failure"
    assert scan(rig, SECRET) == []
    assert await rig.db.call(Store.verify_event_chain) == []


STOPPED_SENSOR = """
print("debug " + os.environ["TOKEN"], file=sys.stderr, flush=True)
time.sleep(600)
"""


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_sensor_run_a_stop_cancels_leaves_no_secret_in_its_output_files(
    sensing: Callable[[], Rig], sensors_dir: Path, tmp_path: Path
) -> None:
    """The service stopping (SIGTERM cancels the run) after the sensor wrote its secret: its output is
    redacted all the same, not left raw in the state dir until the next run overwrites it."""
    write_sensor(sensors_dir, "stopped", STOPPED_SENSOR, env_file=str(env_file(tmp_path, "sensor.env")))
    rig = sensing()
    folder = rig.config.paths.state_dir / "sensors" / "stopped"
    async with anyio.create_task_group() as group:
        group.start_soon(rig.service.run_due, rig.clock.now())
        with anyio.fail_after(30):
            stderr = folder / "stderr.log"  # agentd's pump has written the line (raw, until the stop)
            while not (stderr.exists() and stderr.stat().st_size):  # noqa: ASYNC110 (a file: no event to wait on)
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    stderr = folder / "stderr.log"
    assert stderr.read_bytes() == b"debug [redacted]\n"
    assert scan(rig, SECRET) == []
