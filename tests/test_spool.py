"""The spool handler beside other writers and on a failing disk (issue 23, 9c and 9d): it never removes
or rewrites a byte it did not write, its own writers interleave whole lines, a line cut short is
followed by a fresh one, and a full, read-only or failing filesystem is a retry that says what failed,
where and why. Real processes, real files, /dev/full, a real tmpfs filled up (root only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from datetime import timedelta
from pathlib import Path

import pytest
from rig import Rig
from support import REPO, missing
from test_delivery import complete_with_messages, with_handlers

from agentd.control.spool import append_line
from agentd.records.messages import Sent


def line(key: str, **message: object) -> bytes:
    return (
        json.dumps({"idempotency_key": key, "message": message, "task_id": 1}, separators=(",", ":")).encode() + b"\n"
    )


@contextmanager
def child(code: str, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A real writer process running `code` (agentd importable), killed if still there at the end."""
    argv = [sys.executable, "-c", textwrap.dedent(code), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) as process:
        try:
            yield process
        finally:
            process.kill()


def run(code: str, *args: str, stdin: str = "") -> str:
    """`code` run to its end in a real process: what it printed."""
    with child(code, *args) as process:
        out, _ = process.communicate(stdin, timeout=120)
        assert process.returncode == 0
    return out


OTHER_WRITER = """
import sys
with open(sys.argv[1], "ab", buffering=0) as spool:  # no lock: a writer that does not know of agentd's
    spool.write(b'{"from": "other", "part": ')
    print("half written", flush=True)
    sys.stdin.readline()
    spool.write(b'1}\\n')
"""


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_another_writers_unfinished_last_line_is_never_removed(tmp_path: Path) -> None:
    spool = tmp_path / "messages.jsonl"
    spool.write_bytes(b'{"from": "before"}\n')
    with child(OTHER_WRITER, str(spool)) as other:
        assert other.stdout is not None and other.stdout.readline() == "half written\n"
        assert append_line(spool, line("k1", n=1), resent=False) == Sent("delivered")
        other.communicate("go on\n", timeout=30)
        assert other.returncode == 0
    assert spool.read_bytes() == (
        b'{"from": "before"}\n' + b'{"from": "other", "part": ' + b"\n" + line("k1", n=1) + b"1}\n"
    ), "every byte the other writer wrote is there, in its order; agentd's line is whole on its own"


def test_a_line_an_earlier_attempt_cut_short_stays_and_the_next_record_starts_on_a_fresh_line(tmp_path: Path) -> None:
    spool = tmp_path / "messages.jsonl"
    torn = line("k1", n=1)[:25]
    spool.write_bytes(line("k0") + torn)  # a crash mid-write
    assert append_line(spool, line("k1", n=1), resent=True) == Sent("delivered")
    assert append_line(spool, line("k1", n=1), resent=True).note == (
        "already in the spool: an interrupted attempt had written it"
    )
    assert spool.read_bytes() == line("k0") + torn + b"\n" + line("k1", n=1)


def test_a_resend_finds_its_whole_line_however_large_the_spool(tmp_path: Path) -> None:
    spool = tmp_path / "messages.jsonl"
    mine = line("mine", text="x" * 100_000)
    spool.write_bytes(b"".join(line(f"k{n}", text="y" * 1000) for n in range(500)) + mine + line("after"))
    assert append_line(spool, mine, resent=True).note is not None
    assert append_line(spool, mine[:-1] + b"  \n", resent=True).note is None, "not the same line: written"
    assert spool.read_bytes().count(b'"mine"') == 2


WRITERS = """
import sys
from pathlib import Path
from agentd.control.spool import append_line
name, count = sys.argv[2], int(sys.argv[3])
for n in range(count):
    pad = "z" * (n * 97 % 9000)
    line = ('{"idempotency_key":"%s-%d","message":{"pad":"%s"},"task_id":1}\\n' % (name, n, pad)).encode()
    assert append_line(Path(sys.argv[1]), line, resent=n % 3 == 0).outcome == "delivered"
"""

LOCKING_WRITER = """
import fcntl, sys
with open(sys.argv[1], "ab", buffering=0) as spool:
    for n in range(int(sys.argv[2])):
        fcntl.flock(spool, fcntl.LOCK_EX)  # a writer that takes the lock as agentd does: whole lines
        spool.write(b'{"from": "locking", ')
        spool.write(b'"n": %d}\\n' % n)
        fcntl.flock(spool, fcntl.LOCK_UN)
"""


@pytest.mark.process
def test_agentds_writers_and_a_locking_writer_interleave_whole_lines(tmp_path: Path) -> None:
    spool = tmp_path / "messages.jsonl"
    with ExitStack() as running:
        writers = [running.enter_context(child(WRITERS, str(spool), f"w{n}", "200")) for n in range(4)]
        writers.append(running.enter_context(child(LOCKING_WRITER, str(spool), "300")))
        assert [w.wait(timeout=120) for w in writers] == [0] * 5
    lines = [json.loads(raw) for raw in spool.read_bytes().splitlines()]
    keys = sorted(x["idempotency_key"] for x in lines if "idempotency_key" in x)
    assert keys == sorted(f"w{w}-{n}" for w in range(4) for n in range(200))
    assert sorted(x["n"] for x in lines if x.get("from") == "locking") == list(range(300))


HOLDER = """
import fcntl, sys
spool = open(sys.argv[1], "ab")
fcntl.flock(spool, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


@pytest.mark.process
def test_a_writer_that_holds_the_lock_forever_makes_a_retry_not_a_hang(tmp_path: Path) -> None:
    spool = tmp_path / "messages.jsonl"
    with child(HOLDER, str(spool)) as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        sent = append_line(spool, line("k1"), resent=False, lock_wait_s=0.3)
    assert sent == Sent("retry", f"cannot lock {spool}: another writer held it for 0.3s")
    assert spool.read_bytes() == b""


# --- a disk that fails (9d) -------------------------------------------------------------------------


def test_a_full_device_is_a_retry_naming_what_failed_where_and_the_errno() -> None:
    sent = append_line(Path("/dev/full"), line("k1"), resent=False)
    assert sent == Sent("retry", "cannot append to /dev/full: No space left on device (ENOSPC)")


FSIZE_WRITER = """
import json, resource, signal, sys
from pathlib import Path
from agentd.control.spool import append_line
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # then a write past the limit is EFBIG, not a kill
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
sent = append_line(Path(sys.argv[1]), sys.stdin.buffer.read(), resent=False)
print(json.dumps([sent.outcome, sent.error]))
"""


@pytest.mark.process
def test_a_write_cut_short_by_the_file_size_limit_is_a_retry_and_the_next_line_starts_fresh(tmp_path: Path) -> None:
    spool = tmp_path / "messages.jsonl"
    spool.write_bytes(line("k0"))
    mine = line("k1", text="x" * 5000)
    out = run(FSIZE_WRITER, str(spool), str(len(line("k0")) + 1000), stdin=mine.decode())
    assert json.loads(out) == ["retry", f"cannot append to {spool}: File too large (EFBIG)"]
    cut = spool.read_bytes()
    assert cut.startswith(line("k0")) and len(cut) == len(line("k0")) + 1000, "a partial line was written"
    assert append_line(spool, mine, resent=True) == Sent("delivered"), "the partial line is not taken for it"
    assert spool.read_bytes() == cut + b"\n" + mine


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs of its own (root only; skipped by name elsewhere), unmounted after."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0:
        missing("TMPFS", "not root: a tmpfs cannot be mounted to fill it")
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode != 0:
        missing("TMPFS", f"mount -t tmpfs failed: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(folder: Path) -> None:
    """Write until the filesystem is full (ENOSPC)."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with suppress(OSError):
            while True:
                os.write(fd, b"f" * 4096)
    finally:
        os.close(fd)


@pytest.mark.process
@pytest.mark.asyncio
async def test_a_full_then_read_only_filesystem_retries_per_the_backoff_and_delivers_once_it_has_room(
    rig_factory: Callable[..., Rig], tiny_tmpfs: Path
) -> None:
    spool = tiny_tmpfs / "out" / "messages.jsonl"
    handler = {"handler_id": "spool", "kind": "spool", "path": str(spool), "backoff_base_s": 30}
    rig = rig_factory(with_handlers(handler, default="spool"))
    _, [key] = await complete_with_messages(rig, {"text": "x" * 3000})
    deliveries = rig.dispatcher().outbox.deliveries
    spool.parent.mkdir()
    fill(tiny_tmpfs)
    assert await deliveries.deliver_due(rig.clock.now()) == 1
    [item] = rig.store.list_outbox()
    assert (item.state, item.attempts) == ("pending", 1)
    assert item.last_error in (
        f"cannot append to {spool}: No space left on device (ENOSPC)",
        f"cannot open {spool}: No space left on device (ENOSPC)",
    )
    assert item.next_attempt_at == rig.clock.now() + timedelta(seconds=30)

    (tiny_tmpfs / "filler").unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], check=True)
    rig.clock.advance(30)
    assert await deliveries.deliver_due(rig.clock.now()) == 1
    [item] = rig.store.list_outbox()
    assert item.state == "pending" and "Read-only file system (EROFS)" in (item.last_error or ""), item.last_error

    subprocess.run(["mount", "-o", "remount,rw", str(tiny_tmpfs)], check=True)
    rig.clock.advance(60)
    assert await deliveries.deliver_due(rig.clock.now()) == 1
    [item] = rig.store.list_outbox()
    assert (item.state, item.attempts) == ("delivered", 3)
    lines = [json.loads(raw) for raw in spool.read_bytes().splitlines() if raw.startswith(b'{"idempotency_key"')]
    assert [x["idempotency_key"] for x in lines if x.get("message")] == [key]


@pytest.mark.asyncio
async def test_every_oserror_of_a_handler_names_what_failed_where_and_the_errno(
    rig_factory: Callable[..., Rig], tmp_path: Path
) -> None:
    missing_env = tmp_path / "nowhere.env"
    command = {"handler_id": "cmd", "kind": "command", "argv": ["/bin/true"], "env_file": str(tmp_path / "cmd.env")}
    (tmp_path / "cmd.env").write_text("TOKEN=abcdefgh\n")
    (tmp_path / "cmd.env").chmod(0o600)
    rig = rig_factory(with_handlers(command, default="cmd"))
    (tmp_path / "cmd.env").rename(missing_env)  # gone after config check: the attempt cannot read it
    await complete_with_messages(rig, {"text": "x"})
    assert await rig.dispatcher().outbox.deliveries.deliver_due(rig.clock.now()) == 1
    [item] = rig.store.list_outbox()
    assert item.last_error == f"cannot read env_file {tmp_path / 'cmd.env'}: No such file or directory (ENOENT)"

    missing_env.rename(tmp_path / "cmd.env")
    work = rig.config.paths.state_dir / "deliveries"
    work.write_text("a file where the scratch folders go")
    rig.clock.advance(3600)
    assert await rig.dispatcher().outbox.deliveries.deliver_due(rig.clock.now()) == 1
    [item] = rig.store.list_outbox()
    assert item.last_error == f"cannot create a scratch folder in {work}: File exists (EEXIST)"
