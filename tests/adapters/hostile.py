#!/usr/bin/env python3
"""An attempt that tries to act as its operator (docs/install-and-deploy.md, "The boundary"). Its payload names what
to try: {"approve": TASK_ID, "report": "relative path in the workspace", "env_file": "path", "config": "path",
"sensor_home": "the sensor user's home", "other_workspace": "another agent's workspace", "denied_command":
"a Bash command the tool policy denies", "held_command": "one it asks a person about", "held_call_file": "where
the test leaves that held call's id"}.

Each try is recorded as {"name", "succeeded", "detail"} in the report; the attempt itself completes, so
the test reads what it found. Every try is something an agent could do with what its environment
gives it: agentd on PATH, AGENTD_* variables, its parent's pid, its own cgroup."""

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

payload = json.loads(sys.stdin.read() or "{}")
state_dir = Path(os.environ.get("AGENTD_PATHS__STATE_DIR", "/nonexistent"))
tries = []


def attempt(name, action, *args, **kwargs):
    try:
        detail = action(*args, **kwargs)
        tries.append({"name": name, "succeeded": True, "detail": str(detail)[:500]})
    except Exception as exc:  # the expected outcome: refused
        tries.append({"name": name, "succeeded": False, "detail": f"{type(exc).__name__}: {exc}"[:500]})


def agentd(*args, keep_marker=True):
    env = dict(os.environ)
    if not keep_marker:
        env.pop("AGENTD_ATTEMPT_ID", None)  # an attempt can unset what says it is one
    done = subprocess.run(["agentd", *args], env=env, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"exit {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()[-300:]


def read_database():
    with sqlite3.connect(f"file:{state_dir / 'agentd.db'}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT count(*) FROM tasks").fetchone()


def write_evidence():
    task, attempt_id = os.environ["AGENTD_TASK_ID"], os.environ["AGENTD_ATTEMPT_ID"]
    target = state_dir / "attempts" / task / attempt_id / "result.json"
    target.write_text('{"status": "completed"}')
    return target


def escape_cgroup():
    own = Path("/proc/self/cgroup").read_text().splitlines()[-1].split("::", 1)[1]
    mount = next(
        line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines() if " - cgroup2 " in line
    )
    parent = Path(mount) / own.lstrip("/") / ".." / ".."
    (parent / "cgroup.procs").write_text(str(os.getpid()))
    return parent


CONTROL_VERBS = [
    ["approve", str(payload.get("approve", 1)), "--note", "self-approved"],
    ["task", "add", "--type", "example", "--source", "operator:x", "--priority", "1", "--payload", "{}"],
    ["dispatch", "resume"],
    ["dispatch", "pause"],
]
for keep in (True, False):
    for verb in CONTROL_VERBS:
        name = "agentd " + " ".join(verb[:2]) + ("" if keep else " (AGENTD_ATTEMPT_ID unset)")
        attempt(name, agentd, *verb, keep_marker=keep)
attempt("open the database", read_database)
attempt("read the env_file", lambda: Path(payload["env_file"]).read_text())
attempt("write its own evidence", write_evidence)
attempt("kill the dispatcher", lambda: os.kill(os.getppid(), signal.SIGTERM))
attempt("become the service user", lambda: os.setuid(os.stat(state_dir).st_uid))
attempt("leave its cgroup", escape_cgroup)


def hold_capabilities():
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    held = {name: status[name].strip() for name in ("CapInh", "CapPrm", "CapEff", "CapAmb") if int(status[name], 16)}
    if not held:
        raise PermissionError("no capabilities")
    return held


attempt("hold a capability", hold_capabilities)


def others_processes():
    """The processes of every other user but root (the services', a running sensor's): their environment
    holds what the attempt must not see, and a readable one is also one it may trace."""
    me, found = os.getuid(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                uid = int((entry / "status").read_text().split("Uid:", 1)[1].split()[0])
            except (OSError, IndexError, ValueError):
                continue
            if uid not in (me, 0):
                found.append(int(entry.name))
    return found


def reach_others_processes():
    pids = others_processes()
    if not pids:
        raise LookupError("no process of another user to try (the dispatcher's should be one)")
    reached = []
    for pid in pids:
        for what, action in (
            ("environ", lambda pid=pid: Path(f"/proc/{pid}/environ").read_bytes()),
            ("mem", lambda pid=pid: open(f"/proc/{pid}/mem", "rb").close()),
            ("signal", lambda pid=pid: os.kill(pid, 0)),
        ):
            try:
                action()
                reached.append(f"{what} of {pid}")
            except OSError:
                pass
    if not reached:
        raise PermissionError(f"none of {len(pids)} processes of other users")
    return reached


attempt("reach another user's process (the services', a sensor's)", reach_others_processes)
if payload.get("sensor_home"):
    home = Path(payload["sensor_home"])
    attempt("list the sensors' folders", lambda: os.listdir(home))
    attempt("plant a file among the sensors' folders", lambda: (home / "planted").write_text("x"))
if payload.get("other_workspace"):
    attempt("write another agent's workspace", lambda: Path(payload["other_workspace"], "planted").write_text("x"))


# The tool policy (docs/policy.md): the attempt tries to decide its own calls.
def policy_request(request):
    """One question on the policy socket, as agentd's hook asks it (through /proc: the path may be long)."""
    path = os.environ["AGENTD_POLICY_SOCKET"]
    folder = os.open(os.path.dirname(path), os.O_PATH | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(30)
            sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(path)}")
            sock.sendall(json.dumps(request).encode() + b"\n")
            answer = json.loads(sock.makefile().readline())
    finally:
        os.close(folder)
    if answer.get("decision") != "allow":
        raise PermissionError(f"answered {answer}")
    return answer


def approve_own_call():
    """Ask for a call a person must decide, learn its id (the test leaves it in the workspace) and approve it."""
    question = json.dumps({"command": payload["held_command"]})
    asking = subprocess.Popen(["agentd", "ask", "--tool", "Bash", "--input", question], stdout=subprocess.PIPE)
    told = Path(payload["held_call_file"])
    deadline = time.monotonic() + 30
    while not told.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    call_id = told.read_text().strip()
    for keep in (True, False):
        name = "agentd approve --call" + ("" if keep else " (AGENTD_ATTEMPT_ID unset)")
        attempt(name, agentd, "approve", "--call", call_id, keep_marker=keep)
    asking.wait(timeout=60)
    if asking.returncode != 0:
        raise PermissionError(f"agentd ask exited {asking.returncode}: the call was denied")
    return "its held call was allowed"


if os.environ.get("AGENTD_POLICY_SOCKET"):
    sock_path = os.environ["AGENTD_POLICY_SOCKET"]
    attempt("unlink the policy socket", os.unlink, sock_path)
    attempt("rename the policy socket", os.rename, sock_path, sock_path + ".moved")
    forged = {"harness": "claude", "tool": "Bash", "input": {"command": payload.get("denied_command", "")}, "cwd": ""}
    forged.update(decision="allow", explicit=True, by="operator", status="allowed", rule="allow: the operator said so")
    attempt("answer its own question (a forged request)", policy_request, forged)
    if payload.get("held_call_file"):
        attempt("run its held call without a person", approve_own_call)

report = Path(payload.get("report", "hostile-report.json"))
report.write_text(json.dumps(tries, indent=1))
outcome = {
    "status": "completed",
    "machine_status": "ok",
    "operator_summary": f"{sum(t['succeeded'] for t in tries)} of {len(tries)} tries succeeded",
    "artifact_paths": [str(report)],
}
Path(os.environ["AGENTD_RESULT_PATH"]).write_text(json.dumps(outcome))
