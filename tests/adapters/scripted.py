#!/usr/bin/env python3
"""A test adapter driven by its payload: {"outcome": {...}, "stdout": "...", "stderr": "...", "sleep_s": N,
"files": {"path": "text"} (both may name variables), "exit": N, "env_dump": true, "once_marker": "path",
"raw_result": "text written to $AGENTD_RESULT_PATH as-is (poison the outcome)",
"stubborn": true (ignore SIGTERM, start a grandchild that ignores it too, write both pids to pids.txt),
"daemon": "path" (double-fork a setsid daemon with an empty environment; it writes its pid to path),
"append": "path" (append "TASK ATTEMPT" to it: a side effect), "stdout_hex": "raw bytes for stdout",
"result_symlink": "target" (make the result file a symlink to it), "whoami": true (print its uid and gid),
"chmod_workspace": "700" (change the mode of $AGENTD_WORKSPACE, which the run user owns, last),
"nest": N (first, make N folders one inside the other in its HOME, the run dir agentd removes after it),
"sparse": {"path": bytes} (files of that size that hold nothing: `truncate -s`), "forks": N (start N sleeping
children at once, then end them), "hog_mb": N (hold N MiB, every page touched), "asks": [{"tool": T, "input":
{...}, "marker": "path"}] (ask with `agentd ask`, each in turn; make the marker file only when allowed; every
answer is appended to asked.jsonl in the working dir)}.
Text fields may name environment variables as ${NAME}, or ${json:NAME} for the value escaped as inside a
JSON string (how a test makes the script echo a secret)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


def expand(text):
    def value(match):
        found = os.environ.get(match.group(2), "")
        return json.dumps(found)[1:-1] if match.group(1) else found

    return re.sub(r"\$\{(json:)?([A-Z0-9_]+)\}", value, text)


payload = json.loads(sys.stdin.read() or "{}")
if payload.get("nest"):
    folder = os.open(os.environ["HOME"], os.O_RDONLY)
    for _ in range(payload["nest"]):  # relative to the last one: deeper than PATH_MAX allows a path to name
        os.mkdir("d", dir_fd=folder)
        inner = os.open("d", os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    os.close(folder)
marker = payload.get("once_marker")
if marker and not Path(marker).exists():
    Path(marker).write_text(os.environ["AGENTD_ATTEMPT_ID"])
    time.sleep(payload.get("sleep_first_s", 600))
if payload.get("stubborn"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    grandchild = subprocess.Popen([sys.executable, "-c", stubborn])
    Path("pids.txt").write_text(f"{os.getpid()} {grandchild.pid}")
if payload.get("daemon"):
    code = (
        "import os, sys, time\n"
        "if os.fork(): os._exit(0)\n"
        "os.setsid()\n"
        "if os.fork(): os._exit(0)\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "time.sleep(600)\n"
    )
    subprocess.run([sys.executable, "-c", code, os.path.abspath(payload["daemon"])], env={}, check=True)
if payload.get("append"):
    with open(payload["append"], "a") as log:
        log.write(f"{os.environ['AGENTD_TASK_ID']} {os.environ['AGENTD_ATTEMPT_ID']}\n")
if payload.get("stdout_hex"):
    sys.stdout.buffer.write(bytes.fromhex(payload["stdout_hex"]))
    sys.stdout.buffer.write(b"\n")
for path, text in payload.get("files", {}).items():
    Path(expand(path)).parent.mkdir(parents=True, exist_ok=True)
    Path(expand(path)).write_text(expand(text))
for call in payload.get("asks", []):
    asked = subprocess.run(
        ["agentd", "ask", "--tool", call["tool"], "--input", json.dumps(call.get("input", {}))],
        capture_output=True,
        text=True,
    )
    if asked.returncode == 0 and call.get("marker"):
        Path(call["marker"]).write_text("ran")
    with open("asked.jsonl", "a") as log:
        said = asked.stdout + asked.stderr
        log.write(json.dumps({"tool": call["tool"], "rc": asked.returncode, "said": said}) + "\n")
if payload.get("whoami"):
    print(f"uid {os.getuid()} gid {os.getgid()}")
if payload.get("env_dump"):
    print(json.dumps(dict(os.environ)))
if "stdout" in payload:
    print(expand(payload["stdout"]))
if "stderr" in payload:
    print(expand(payload["stderr"]), file=sys.stderr)
sys.stdout.flush()
if payload.get("forks"):  # start this many children that sleep (a fork bomb, bounded), then go on
    children = []
    for _ in range(payload["forks"]):
        children.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
    for child in children:
        child.kill()
if payload.get("hog_mb"):  # hold this much memory, every page touched
    hog = bytearray(payload["hog_mb"] * 1024 * 1024)
    for offset in range(0, len(hog), 4096):
        hog[offset] = 1
time.sleep(payload.get("sleep_s", 0))
if "outcome" in payload:
    Path(os.environ["AGENTD_RESULT_PATH"]).write_text(expand(json.dumps(payload["outcome"])))
if "result_symlink" in payload:
    os.symlink(payload["result_symlink"], os.environ["AGENTD_RESULT_PATH"])
if "raw_result" in payload:
    Path(os.environ["AGENTD_RESULT_PATH"]).write_text(expand(payload["raw_result"]))
for path, size in payload.get("sparse", {}).items():
    with open(path, "wb") as sparse:
        sparse.truncate(size)
if payload.get("chmod_workspace"):
    os.chmod(os.environ["AGENTD_WORKSPACE"], int(payload["chmod_workspace"], 8))
sys.exit(payload.get("exit", 0))
