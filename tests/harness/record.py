"""Record tests/fixtures/harness/: the pinned claude, codex and hermes CLIs run against tests/fakemodel, redacted.

`make record-fixtures` runs this inside tests/harness/isolated.sh after tests/harness/install.sh. Every
scenario gets a fresh scratch HOME, TMPDIR, *_HOME and work dir and a fresh fake server; what the CLI printed
(and the files it wrote that agentd reads) are redacted (tests/harness/redact.py) and written with
fixtures.json, which says per scenario what ran, how the CLI exited and which files it gave. Ollama has
no CLI: its files are the fake server's own Ollama protocol, fetched over HTTP.

    python tests/harness/record.py [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "tests"))

from fakemodel import FakeModelServer  # noqa: E402
from harness.redact import Redactor, path_slug  # noqa: E402
from harness.scenarios import PROMPT, SCENARIOS, Scenario  # noqa: E402

OUT = REPO / "tests" / "fixtures" / "harness"
MANIFEST = "fixtures.json"
RUN_TIMEOUT_S = 120
KEY = "fake-key-0f3b9c1d"  # what the CLIs send as their API key; redacted wherever it shows
# Where the scenario's scratch dirs show in a fixture.
PLACES = {"work": "/srv/agent/work", "home": "/srv/agent/home", "tmp": "/srv/agent/tmp", "cli": "/srv/agent/cli"}


# --- where the CLIs are ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Clis:
    cache: Path

    @property
    def npm_bin(self) -> Path:
        return self.cache / "npm" / "node_modules" / ".bin"

    @property
    def hermes_bin(self) -> Path:
        return self.cache / "hermes-venv" / "bin"

    def command(self, cli: str) -> Path:
        return self.hermes_bin / "hermes" if cli == "hermes" else self.npm_bin / cli

    def path_env(self, cli: str) -> str:
        node = shutil.which("node")
        first = self.hermes_bin if cli == "hermes" else self.npm_bin
        return os.pathsep.join([str(first), *([str(Path(node).parent)] if node else []), "/usr/bin", "/bin"])

    def version(self, cli: str, home: Path) -> str:
        """The pinned version as the CLI reports it (hermes: its package metadata; its --version goes online)."""
        if cli == "hermes":
            argv = [
                str(self.hermes_bin / "python"),
                "-I",
                "-c",
                "import importlib.metadata as m; print(m.version('hermes-agent'))",
            ]
        else:
            argv = [str(self.command(cli)), "--version"]
        env = {"PATH": self.path_env(cli), "HOME": str(home), "CODEX_HOME": str(home), "DISABLE_AUTOUPDATER": "1"}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "unknown"


# --- one run ----------------------------------------------------------------------------------------------


@dataclass
class Scratch:
    """A scenario's own directories: nothing carries over from one run to the next."""

    root: Path

    def __post_init__(self) -> None:
        for name in ("work", "home", "tmp", "cli"):
            (self.root / name).mkdir(mode=0o700, parents=True)

    def __getitem__(self, name: str) -> Path:
        return self.root / name


@dataclass
class Captured:
    exit_code: int | None
    outputs: dict[str, str]
    argv: list[str]


def run_cli(argv: list[str], cwd: Path, env: dict[str, str], stdin: str) -> tuple[int | None, str, str]:
    """The CLI in its own session; on the timeout its whole group is killed (exit None)."""
    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    ) as child:  # fmt: skip
        try:
            out, err = child.communicate(stdin.encode(), timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            out, err = child.communicate()
            return None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        return child.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def base_env(clis: Clis, cli: str, scratch: Scratch) -> dict[str, str]:
    """Built from nothing (env -i): nothing of the recording user's environment reaches the CLI."""
    return {"PATH": clis.path_env(cli), "HOME": str(scratch["home"]), "TMPDIR": str(scratch["tmp"]), "LANG": "C.UTF-8"}


def record_claude(clis: Clis, scenario: Scenario, scratch: Scratch, url: str) -> Captured:
    """`claude -p` as agentd's claude-code adapter runs it (prompt on stdin), retries off, 5 s per request."""
    env = base_env(clis, "claude", scratch) | {
        "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": KEY, "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0", "API_TIMEOUT_MS": "5000",
    }  # fmt: skip
    env = {k: v for k, v in (env | scenario.env).items() if v}
    argv = [str(clis.command("claude")), "-p", "--no-session-persistence", *scenario.args]
    code, out, _ = run_cli(argv, scratch["work"], env, PROMPT)
    return Captured(code, {"stdout": out}, argv)


def codex_config(url: str, settings: dict[str, Any]) -> str:
    """$CODEX_HOME/config.toml as agentd's codex adapter writes it (one retry each, the idle timeout lowered)."""
    idle = settings.get("stream_idle_timeout_ms", 5000)
    return "\n".join([
        "check_for_update_on_startup = false", 'model_provider = "fake"', "[analytics]", "enabled = false",
        "[features]", "plugins = false", "remote_plugin = false", "apps = false", "[model_providers.fake]",
        'name = "fake"', f'base_url = "{url}/v1"', 'env_key = "FAKE_MODEL_API_KEY"', 'wire_api = "responses"',
        "request_max_retries = 1", "stream_max_retries = 1", f"stream_idle_timeout_ms = {idle}", "",
    ])  # fmt: skip


def record_codex(clis: Clis, scenario: Scenario, scratch: Scratch, url: str) -> Captured:
    """`codex exec --json` as agentd's codex adapter runs it: the prompt on stdin ("-"), -o for the last message."""
    (scratch["cli"] / "config.toml").write_text(codex_config(url, scenario.settings))
    last = scratch["cli"] / "last_message.txt"
    env = base_env(clis, "codex", scratch) | {"CODEX_HOME": str(scratch["cli"]), "FAKE_MODEL_API_KEY": KEY}
    argv = [
        str(clis.command("codex")), "exec", "--json", "--skip-git-repo-check", "--ephemeral", "-o", str(last),
        "-s", "workspace-write", *scenario.args, "-",
    ]  # fmt: skip
    code, out, _ = run_cli(argv, scratch["work"], env, PROMPT)
    return Captured(code, {"stdout": out, "last_message": last.read_text() if last.is_file() else ""}, argv)


def hermes_config(url: str) -> str:
    """$HERMES_HOME/config.yaml as agentd's hermes adapter writes it (JSON is YAML), one API attempt."""
    document = {
        "model": {"provider": "custom", "default": "fake-model", "context_length": 262144, "base_url": f"{url}/v1",
                  "api_key": KEY},
        "security": {"allow_lazy_installs": False},
        "agent": {"api_max_retries": 1},
    }  # fmt: skip
    return json.dumps(document, indent=2) + "\n"


def record_hermes(clis: Clis, scenario: Scenario, scratch: Scratch, url: str) -> Captured:
    """`hermes -z PROMPT --usage-file F` as agentd's hermes adapter runs it (or `chat -q -Q`, to show its banner)."""
    (scratch["cli"] / "config.yaml").write_text(hermes_config(url))
    usage = scratch["cli"] / "usage.json"
    seconds = str(scenario.settings.get("timeout_s", 5))
    env = base_env(clis, "hermes", scratch) | {
        "HERMES_HOME": str(scratch["cli"]), "HERMES_DISABLE_LAZY_INSTALLS": "1", "HERMES_API_TIMEOUT": seconds,
        "HERMES_STREAM_READ_TIMEOUT": seconds, "HERMES_STREAM_STALE_TIMEOUT": seconds,
        "HERMES_STREAM_STALE_GIVEUP": "1", "HERMES_STREAM_RETRIES": "0",
    }  # fmt: skip
    hermes = str(clis.command("hermes"))
    if scenario.settings.get("chat"):
        argv = [hermes, "chat", "-q", PROMPT, "-Q"]
    else:
        argv = [hermes, "-z", PROMPT, "--usage-file", str(usage)]
    code, out, _ = run_cli(argv, scratch["work"], env, "")
    return Captured(code, {"stdout": out, "usage": usage.read_text() if usage.is_file() else ""}, argv)


# What agentd's ollama-generate adapter (and its probe) ask an Ollama endpoint: method, path, JSON body.
OLLAMA_REQUESTS: dict[str, tuple[str, str, dict[str, Any] | None]] = {
    "generate": ("POST", "/api/generate", {"model": "fake-model", "prompt": PROMPT, "stream": True}),
    "generate-whole": ("POST", "/api/generate", {"model": "fake-model", "prompt": PROMPT, "stream": False}),
    "tags": ("GET", "/api/tags", None),
}


def record_ollama(clis: Clis, scenario: Scenario, scratch: Scratch, url: str) -> Captured:
    """The fake server's Ollama protocol over HTTP: Ollama has no CLI to record."""
    asked = sorted(set(scenario.files.values()))
    texts, shown = {}, []
    with httpx.Client(base_url=url, trust_env=False, timeout=30) as client:
        for name in asked:
            method, path, body = OLLAMA_REQUESTS[name]
            texts[name] = client.request(method, path, json=body).raise_for_status().text
            shown.append(f"{method} {path}" + (f" {json.dumps({'stream': body['stream']})}" if body else ""))
    return Captured(None, texts, shown)


RECORDERS = {"claude": record_claude, "codex": record_codex, "hermes": record_hermes, "ollama": record_ollama}


def record(clis: Clis, scenario: Scenario, scratch: Scratch) -> Captured:
    """One scenario against a fresh fake server; refuses a capture whose tool did not do what it claims."""
    with FakeModelServer(turns=scenario.turns(scratch["work"]), default=scenario.default) as fake:
        captured = RECORDERS[scenario.cli](clis, scenario, scratch, fake.url)
    made = (scratch["work"] / "tool_marker.txt").is_file()
    if scenario.marker is not None and made != scenario.marker:
        raise RuntimeError(f"{scenario.cli}: tool_marker.txt {'missing' if scenario.marker else 'written'}: "
                           f"{captured.outputs.get('stdout', '')[-2000:]}")  # fmt: skip
    return captured


# --- redacting and writing --------------------------------------------------------------------------------


def redactor(scratch: Scratch, clis: Clis) -> Redactor:
    """Every scratch path (and claude's slug of it), the CLI cache, the repo and the key, by placeholder."""
    literals = {KEY: "[redacted-api-key]"}
    places = {str(scratch[name]): place for name, place in PLACES.items()}
    places |= {str(scratch.root): "/srv/agent", str(clis.cache): "/opt/agentd-harness", str(REPO): "/src/agentd"}
    for real, place in places.items():
        for variant in {real, os.path.realpath(real)}:
            literals[variant] = place
            literals[path_slug(variant)] = path_slug(place)
    return Redactor(literals, socket.gethostname())


def entry(scenario: Scenario, captured: Captured, versions: dict[str, str], clean: Redactor) -> dict[str, Any]:
    """A scenario's line in fixtures.json: what ran (redacted), how it ended, which files it gave."""
    return {
        "cli": scenario.cli,
        "version": versions.get(scenario.cli),
        "what": scenario.what,
        "argv": [clean.text(arg) for arg in captured.argv],
        "exit_code": captured.exit_code,
        "files": sorted(scenario.files),
    }


def record_all(clis: Clis, names: list[str], staging: Path) -> dict[str, dict[str, Any]]:
    """Record each named scenario into `staging`; the manifest entries of the files written."""
    root = Path(tempfile.mkdtemp(prefix="agentd-record-"))
    try:
        versions = {cli: clis.version(cli, root) for cli in ("claude", "codex", "hermes")}
        entries: dict[str, dict[str, Any]] = {}
        for number, name in enumerate(names):
            scenario = SCENARIOS[name]
            scratch = Scratch(root / f"{number:02d}-{name}")
            captured = record(clis, scenario, scratch)
            clean = redactor(scratch, clis)
            for file, output in scenario.files.items():
                text = clean.text(captured.outputs[output])
                if leaked := clean.leaks(text):
                    raise RuntimeError(f"{file}: still names {leaked} after redaction")
                (staging / file).write_text(text)
            entries[name] = entry(scenario, captured, versions, clean)
            print(f"record.py: {name}: exit {captured.exit_code}, {', '.join(scenario.files)}", file=sys.stderr)
        return entries
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write(out: Path, staging: Path, entries: dict[str, dict[str, Any]], *, everything: bool) -> None:
    """Move the new files into `out` and merge their scenarios into its fixtures.json; after a full
    recording (`everything`), the files of scenarios that are gone go too (only files the manifest named)."""
    manifest_path = out / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {}
    if everything:
        made = {file for scenario in entries.values() for file in scenario["files"]}
        for file in {file for scenario in manifest.values() for file in scenario["files"]} - made:
            (out / file).unlink(missing_ok=True)
        manifest = {}
    for scenario in entries.values():
        for file in scenario["files"]:
            os.replace(staging / file, out / file)
    manifest.update(entries)
    text = json.dumps(dict(sorted(manifest.items())), indent=2, ensure_ascii=False) + "\n"
    (staging / MANIFEST).write_text(text)
    os.replace(staging / MANIFEST, manifest_path)


def selected(only: list[str]) -> list[str]:
    """Scenario names from --only (a scenario name or one of its file names); all of them by default."""
    if not only:
        return list(SCENARIOS)
    names = [n for n, s in SCENARIOS.items() if n in only or set(s.files) & set(only)]
    unknown = set(only) - set(names) - {f for n in names for f in SCENARIOS[n].files}
    if unknown:
        raise SystemExit(f"record.py: no scenario or fixture named {sorted(unknown)}; known: {sorted(SCENARIOS)}")
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="fixture folder (default: tests/fixtures/harness)")
    parser.add_argument("--only", nargs="+", default=[], help="scenario names or fixture file names")
    default_cache = os.environ.get("AGENTD_HARNESS_CACHE") or str(REPO / ".cache" / "harness")
    parser.add_argument("--cache", type=Path, default=Path(default_cache), help="where install.sh put the CLIs")
    args = parser.parse_args(argv)
    clis = Clis(args.cache.resolve())
    names = selected(args.only)
    missing = [
        str(clis.command(c)) for c in {SCENARIOS[n].cli for n in names} - {"ollama"} if not clis.command(c).exists()
    ]
    if missing:
        print(f"record.py: not installed: {', '.join(missing)} (run tests/harness/install.sh)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out, prefix=".staging-") as staging:
        write(args.out, Path(staging), record_all(clis, names, Path(staging)), everything=not args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
