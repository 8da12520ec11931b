#!/usr/bin/env python3
"""A test adapter that attacks its attempt's policy socket ($AGENTD_POLICY_SOCKET), driven by its payload; each
attack runs in turn, then it prints the payload's `outcome` block (if any) and exits 0:

- "hold": {"loops": N, "stagger_s": S, "tool": T, "command": C, "for_s": F}: N threads, started S seconds apart,
  each asking about the call again as soon as it is answered, for F seconds (default: as long as the attempt
  runs; an `ask` rule holds it);
- "flood": {"threads": N, "calls": M, "command": C}: N threads asking M calls in all, as fast as they can;
- "hangups": N: connect and close at once, N times (and N more that send half a request and hang up);
- "impostor": {"tool_use_id": ID, "tool": T}: ask as if a harness's hook, naming a call id no harness announced.

Every answer is counted in attacks.json in the working dir: {attack: {"allow": n, "deny": n, "reasons": [...]}}.
Standard library only: it runs as the attempt's user, like anything an attempt runs."""

import json
import os
import socket
import sys
import threading
import time

PATH = os.environ.get("AGENTD_POLICY_SOCKET", "")
tally: dict[str, dict] = {}
lock = threading.Lock()


def connect(sock: socket.socket) -> None:
    """Through the folder's descriptor: a run dir can be deeper than a socket address may be long."""
    folder = os.open(os.path.dirname(PATH), os.O_PATH)
    try:
        sock.connect(f"/proc/self/fd/{folder}/{os.path.basename(PATH)}")
    finally:
        os.close(folder)


def ask(request: dict, within_s: float = 120.0) -> dict:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(within_s)
    try:
        connect(sock)
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            lines = [line for line in data.split(b"\n") if line.strip()]
            if lines and b'"held"' not in lines[-1] and data.endswith(b"\n"):
                return json.loads(lines[-1])
        return {"decision": "deny", "reason": "closed"}
    except OSError as exc:
        return {"decision": "deny", "reason": f"socket: {exc}"}
    finally:
        sock.close()


def count(attack: str, answer: dict) -> None:
    with lock:
        kept = tally.setdefault(attack, {"allow": 0, "deny": 0, "reasons": []})
        kept["allow" if answer.get("decision") == "allow" else "deny"] += 1
        if len(kept["reasons"]) < 20 and answer.get("reason") not in kept["reasons"]:
            kept["reasons"].append(answer.get("reason"))
        with open("attacks.json.new", "w") as out:
            json.dump(tally, out)
        os.replace("attacks.json.new", "attacks.json")


def hold(spec: dict) -> None:
    request = {"tool": spec.get("tool", "Bash"), "input": {"command": spec.get("command", "curl https://x")}}

    ends = time.monotonic() + spec.get("for_s", 3600)

    def loop() -> None:
        while time.monotonic() < ends:
            count("hold", ask(request))

    threads = []
    for _ in range(spec.get("loops", 2)):
        threads.append(threading.Thread(target=loop, daemon=True))
        threads[-1].start()
        time.sleep(spec.get("stagger_s", 1.0))
    for thread in threads:
        thread.join()


def flood(spec: dict) -> None:
    per_thread = max(1, spec.get("calls", 100) // spec.get("threads", 4))
    request = {"tool": "Bash", "input": {"command": spec.get("command", "git push -f")}}

    def loop() -> None:
        for _ in range(per_thread):
            count("flood", ask(request))

    threads = [threading.Thread(target=loop) for _ in range(spec.get("threads", 4))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def hangups(n: int) -> None:
    for i in range(n):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connect(sock)
            if i % 2:
                sock.sendall(b'{"tool": "Bash", "input": {"command": "ls"}}\n')  # then gone before the answer
        except OSError:
            pass
        finally:
            sock.close()
    count("hangups", {"decision": "deny", "reason": f"{n} hang-ups"})


def impostor(spec: dict) -> None:
    request = {"harness": "claude", "tool": spec.get("tool", "Bash"), "input": {"command": "ls"}}
    request["tool_use_id"] = spec.get("tool_use_id", "toolu_made_up")
    for _ in range(spec.get("times", 3)):
        count("impostor", ask(request))


payload = json.loads(sys.stdin.read() or "{}")
for attack in payload.get("attacks", []):
    name, spec = next(iter(attack.items()))
    {"hold": hold, "flood": flood, "hangups": hangups, "impostor": impostor}[name](spec)
if payload.get("outcome"):
    print("```json\n" + json.dumps(payload["outcome"]) + "\n```")
