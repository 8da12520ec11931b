"""`agentd install` in a temp root, and the units it writes checked by systemd's own analyzer."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import EXAMPLE_CONFIG, REPO, example_raw, missing, nest

from agentd import install as install_module
from agentd.cli import main
from agentd.install import hidden_from_units, toml_edit
from agentd.install.ports import LOOPBACK, PORT_BASE, free_pair, port_is_free
from agentd.work.validation import load_config


def tree(root: Path) -> dict[str, tuple[int, str]]:
    """Every path under root with its mode and content hash: what a no-op must leave equal."""
    found = {}
    for path in sorted(root.rglob("*")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        found[str(path.relative_to(root))] = (path.stat().st_mode, digest)
    return found


@pytest.fixture
def installed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    root = tmp_path / "root"
    assert main(["install", "--root", str(root), "--agent", "demo"]) == 0
    out = capsys.readouterr().out
    assert "next: systemctl enable --now agentd-web@demo.socket agentd-dispatch@demo.socket" in out
    assert "agentd-sensors@demo.socket agentd-dispatch@demo agentd-sensors@demo agentd-web@demo\n" in out
    return root


def test_install_lays_out_the_tree(installed: Path) -> None:
    for path in (
        "etc/agentd/demo.toml",
        "etc/agentd/demo/SOUL.md",
        "etc/agentd/demo/skills/example/SKILL.md",
        "etc/agentd/demo/sensors/inbox/sensor.toml",
        "etc/systemd/system/agentd-dispatch@.service",
        "etc/systemd/system/agentd-sensors@.service",
        "etc/sysusers.d/agentd-demo.conf",
        "etc/tmpfiles.d/agentd-demo.conf",
    ):
        assert (installed / path).is_file(), path
    state = installed / "var/lib/agentd/demo"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert (installed / "var/lib/agentd-run/demo/workspace").is_dir()


# --- issue 21, finding 8: users come from sysusers.d only --------------------------------------

ACCOUNT_FILES = ("passwd", "shadow", "group", "gshadow")
INSTALLS_ONLY = ("etc/agentd", "etc/systemd/system", "etc/sysusers.d", "etc/tmpfiles.d", "var/lib/agentd")


def test_install_into_a_staging_root_writes_no_account_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Untarring the staging tree over / must not replace /etc/passwd and friends: install writes only
    its own files there, and tells the operator how the user gets made on the target."""
    root = tmp_path / "root"
    assert main(["install", "--root", str(root), "--agent", "demo"]) == 0
    out = capsys.readouterr().out
    for name in ACCOUNT_FILES:
        assert not (root / "etc" / name).exists() and not (root / "etc" / f"{name}-").exists(), name
    written = [path.relative_to(root) for path in root.rglob("*") if path.is_file()]
    assert written and all(str(path).startswith(INSTALLS_ONLY) for path in written), written
    assert "systemd-sysusers /etc/sysusers.d/agentd-demo.conf" in out
    assert "systemd-tmpfiles --create /etc/tmpfiles.d/agentd-demo.conf" in out


def test_install_leaves_a_staging_roots_own_account_database_alone(tmp_path: Path) -> None:
    """A root that already has account files (an image being prepared) keeps them byte for byte."""
    root = tmp_path / "image"
    (root / "etc").mkdir(parents=True)
    for name in ACCOUNT_FILES:
        (root / "etc" / name).write_text(f"root:x:0:0:{name}:/root:/bin/sh\n")
    before = {name: (root / "etc" / name).read_bytes() for name in ACCOUNT_FILES}
    install_agent(root, "demo")
    assert {name: (root / "etc" / name).read_bytes() for name in ACCOUNT_FILES} == before


def test_the_sysusers_file_is_the_only_source_of_users() -> None:
    """On the real root the one way a user is made is systemd-sysusers applying install's file; a
    staging tree, a non-root run or a machine without systemd-sysusers makes none and says what to do."""
    sysusers_file, tmpfiles_file = "/etc/sysusers.d/agentd-demo.conf", "/etc/tmpfiles.d/agentd-demo.conf"
    real, staged = install_module.Layout(Path("/"), "demo"), install_module.Layout(Path("/srv/stage"), "demo")
    tools = {"systemd-sysusers": "/usr/bin/systemd-sysusers", "systemd-tmpfiles": "/usr/bin/systemd-tmpfiles"}
    commands, said = install_module.user_setup(real, euid=0, tools=tools)
    assert commands == [
        ["/usr/bin/systemd-sysusers", sysusers_file],
        ["/usr/bin/systemd-tmpfiles", "--create", tmpfiles_file],
    ]
    assert "agentd-demo, agentd-demo-run and agentd-demo-sns" in said
    for layout, euid, found in ((staged, 0, tools), (real, 1000, tools), (real, 0, {})):
        commands, said = install_module.user_setup(layout, euid=euid, tools=found)
        assert commands == [] and "systemd-sysusers" in said and sysusers_file in said, said
    assert "useradd" not in Path(install_module.__file__).read_text()


def test_the_written_config_passes_config_check(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config_path = installed / "etc/agentd/demo.toml"
    assert main(["config", "check", "--config", str(config_path)]) == 0, capsys.readouterr().err
    config = load_config(config_path)
    assert config.agent.internal_name == "demo"
    assert config.paths.state_dir == Path("/var/lib/agentd/demo")
    assert config.paths.skills_dir == installed / "etc/agentd/demo/skills"
    assert config.dispatch.run_as == "agentd-demo-run"  # attempts never run as the services' user
    assert config.paths.workspace == Path("/var/lib/agentd-run/demo/workspace")
    assert config.paths.run_dir == Path("/var/lib/agentd-run/demo/runs")


def test_installing_twice_changes_nothing(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree(installed)
    assert main(["install", "--root", str(installed), "--agent", "demo"]) == 0
    out = capsys.readouterr().out
    assert "nothing to change: already installed" in out and "kept" in out
    assert tree(installed) == before


def test_an_edited_config_is_never_replaced(installed: Path) -> None:
    config = installed / "etc/agentd/demo.toml"
    config.write_text(config.read_text().replace('display_name = "Demo"', 'display_name = "Edited"'))
    assert main(["install", "--root", str(installed), "--agent", "demo"]) == 0
    assert 'display_name = "Edited"' in config.read_text()


def test_uninstall_keeps_config_and_state_unless_purged(installed: Path) -> None:
    assert main(["uninstall", "--root", str(installed), "--agent", "demo"]) == 0
    assert not (installed / "etc/systemd/system/agentd-dispatch@.service").exists()
    assert (installed / "etc/agentd/demo.toml").exists() and (installed / "var/lib/agentd/demo").is_dir()
    assert main(["uninstall", "--root", str(installed), "--agent", "demo", "--purge", "--yes"]) == 0
    assert not (installed / "etc/agentd/demo.toml").exists() and not (installed / "var/lib/agentd/demo").exists()


def test_a_bad_agent_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "--root", str(tmp_path), "--agent", "../etc"]) == 2
    assert "expected a lowercase name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def analyzer() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        missing("SYSTEMD_ANALYZE", "systemd-analyze is not installed on this machine (.ci/run installs it)")
    return found


@pytest.mark.process
def test_systemd_analyze_verify_passes_on_both_units(installed: Path) -> None:
    units = [
        installed / "etc/systemd/system" / name for name in ("agentd-dispatch@.service", "agentd-sensors@.service")
    ]
    result = subprocess.run(
        [analyzer(), "verify", "--man=no", *map(str, units)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


def test_the_units_carry_the_operational_contract() -> None:
    for name in ("agentd-dispatch@.service", "agentd-sensors@.service"):
        unit = (REPO / "units" / name).read_text()
        settings = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
        assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
        assert settings["ExecStartPre"].endswith("migrate") and settings["KillMode"] == "mixed"
        assert settings["Restart"] == "on-failure" and settings["User"] == "agentd-%i"
        for hardening in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome", "RestrictAddressFamilies"):
            assert hardening in settings, (name, hardening)
        assert settings["ReadWritePaths"] == "/var/lib/agentd/%i /var/lib/agentd-run/%i"
        # switching to the run user, nothing more; and nothing a child could inherit (agentd/process/privilege.py)
        assert settings["CapabilityBoundingSet"] == settings["AmbientCapabilities"] == "CAP_SETUID CAP_SETGID"
    web = dict(re.findall(r"^(\w+)=(.*)$", (REPO / "units/agentd-web@.service").read_text(), re.M))
    assert web["Type"] == "notify" and web["NotifyAccess"] == "main"  # started: listed by `agentd status`
    dispatch = dict(re.findall(r"^(\w+)=(.*)$", (REPO / "units/agentd-dispatch@.service").read_text(), re.M))
    defaults: Any = load_config(REPO / "config/identity.example.toml").dispatch
    assert int(dispatch["TimeoutStopSec"].rstrip("s")) > defaults.grace_s + defaults.kill_grace_s


# --- "Honest operations": one test (or more) per finding, each failing on the code before it ------


def install_agent(root: Path, agent: str, *extra: str) -> None:
    assert main(["install", "--root", str(root), "--agent", agent, *extra]) == 0


def metrics_of(root: Path, agent: str) -> dict[str, Any]:
    metrics: dict[str, Any] = tomllib.loads((root / f"etc/agentd/{agent}.toml").read_text())["metrics"]
    return metrics


def ports_of(root: Path, agent: str) -> tuple[int, int]:
    metrics = metrics_of(root, agent)
    dispatch, sensors = (int(metrics[key].rpartition(":")[2]) for key in ("dispatch_listen", "sensors_listen"))
    return dispatch, sensors


# 1. every agent its own pair of metrics ports


def test_a_pair_another_agent_names_or_something_listens_on_is_skipped() -> None:
    assert free_pair(set(), is_free=lambda port: True) == (PORT_BASE, PORT_BASE + 1)
    assert free_pair({9478, 9479}, is_free=lambda port: port != 9480) == (9482, 9483)
    assert free_pair({9479}, is_free=lambda port: True) == (9480, 9481), "a pair is taken if either port is"


def test_a_port_bound_on_loopback_is_not_free() -> None:
    with socket.socket() as held:
        held.bind((LOOPBACK, 0))
        held.listen()
        port = held.getsockname()[1]
        assert not port_is_free(port)
        dispatch, sensors = free_pair(set(), start=port)
    assert dispatch >= port + 2 and sensors == dispatch + 1


def test_install_picks_ports_no_other_agent_names_and_skips_an_unreadable_toml(
    installed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = installed / "etc/agentd/broken.toml"
    broken.write_text("this is [not toml\n")
    install_agent(installed, "web")
    captured = capsys.readouterr()
    assert f"warning: skipped {broken} when picking metrics ports" in captured.err
    demo, web = ports_of(installed, "demo"), ports_of(installed, "web")
    assert not set(demo) & set(web) and web[1] == web[0] + 1 and (web[0] - PORT_BASE) % 2 == 0
    assert f"metrics   {web[0]} (dispatch) and {web[1]} (sensors)" in captured.out


def test_config_check_refuses_a_metrics_address_another_installed_agent_uses(
    installed: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AGENTD_METRICS__DISPATCH_LISTEN", "AGENTD_METRICS__SENSORS_LISTEN"):
        monkeypatch.delenv(name)  # the addresses in the files are checked here, and nothing binds them
    install_agent(installed, "web")
    demo_toml, web_toml = installed / "etc/agentd/demo.toml", installed / "etc/agentd/web.toml"
    taken, own = metrics_of(installed, "demo")["dispatch_listen"], metrics_of(installed, "web")["sensors_listen"]
    web_toml.write_text(web_toml.read_text().replace(f'sensors_listen = "{own}"', f'sensors_listen = "{taken}"'))
    capsys.readouterr()
    assert main(["config", "check", "--config", str(web_toml)]) == 2
    err = capsys.readouterr().err
    assert f"{web_toml}: metrics.sensors_listen: {taken} is also {demo_toml}'s metrics.dispatch_listen" in err
    demo_toml.write_text(demo_toml.read_text().replace("[metrics]\n", "[metrics]\nenabled = false\n"))
    assert main(["config", "check", "--config", str(web_toml)]) == 0, "a disabled endpoint listens on nothing"


# 2. the example's comments survive install, and the header names the real agent


def expected_config(agent: str, ports: tuple[int, int], root: Path) -> dict[str, Any]:
    """What install wrote before it kept comments (tomli_w of these edits), plus the ports (and the console's,
    tested in tests/test_web_install.py)."""
    raw = example_raw()
    raw["agent"].update(agent_id=agent, internal_name=agent, display_name=agent.capitalize())
    raw["constitution"].update(soul_path=f"{agent}/SOUL.md", purpose_path=f"{agent}/PURPOSE.md")
    raw["paths"] = {
        "state_dir": f"/var/lib/agentd/{agent}",
        "workspace": f"/var/lib/agentd-run/{agent}/workspace",
        "skills_dir": f"{agent}/skills",
        "sensors_dir": f"{agent}/sensors",
        "run_dir": f"/var/lib/agentd-run/{agent}/runs",
    }
    raw["dispatch"]["run_as"] = f"agentd-{agent}-run"
    raw["sensors"] = {"run_as": f"agentd-{agent}-sns"}
    raw["payload_schemas"] = {key: f"{agent}/{value}" for key, value in raw["payload_schemas"].items()}
    for adapter in raw["adapters"]:
        if adapter["kind"] == "script":
            adapter["command"] = f"{agent}/{adapter['command']}"
    raw["metrics"].update(dispatch_listen=f"127.0.0.1:{ports[0]}", sensors_listen=f"127.0.0.1:{ports[1]}")
    raw["web"] = tomllib.loads((root / f"etc/agentd/{agent}.toml").read_text())["web"]
    return raw


def test_the_written_config_keeps_the_examples_comments_and_names_the_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_agent(tmp_path, "web")
    assert "without the example's comments" not in capsys.readouterr().err
    text = (tmp_path / "etc/agentd/web.toml").read_text()
    assert tomllib.loads(text) == expected_config("web", ports_of(tmp_path, "web"), tmp_path)
    header = text[: text.index("\n\n")]
    assert "`agentd config check --agent web`" in header and "NAME" not in header and "demo" not in header
    example = EXAMPLE_CONFIG.read_text().splitlines()
    body = example[next(i for i, line in enumerate(example) if not line.startswith("#")) :]
    comments = [line[line.index("#") :] for line in body if "#" in line]
    assert len(comments) > 10
    for comment in comments:
        assert comment in text, comment
    assert 'internal_name = "web"           # load-bearing' in text, "an inline comment keeps its column"


def test_an_example_the_edits_cannot_fit_is_written_without_comments_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(REPO / "config", tmp_path / "config")
    example = tmp_path / "config/identity.example.toml"
    example.write_text(example.read_text().replace("[paths]\n", '[paths]\nlogs_dir = "../var/demo/logs"\n'))
    monkeypatch.setattr(toml_edit, "example_config", lambda: example)
    install_agent(tmp_path / "root", "web")
    assert "web.toml: written without the example's comments" in capsys.readouterr().err
    written = (tmp_path / "root/etc/agentd/web.toml").read_text()
    assert tomllib.loads(written) == expected_config("web", ports_of(tmp_path / "root", "web"), tmp_path / "root")
    assert "`agentd config check --agent web`" in written


# 3. an agentd the units cannot see


@pytest.fixture
def on_this_system(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """install's rules for the real root (/), its writes sent to a temp dir and no setup command run:
    a refusal that broke could not touch this machine."""
    sandbox = tmp_path / "sandbox"

    class Sandboxed(install_module.Layout):
        def _in_root(self, path: str) -> Path:
            return sandbox / path.lstrip("/")

    def refuse(argv: list[str], **kwargs: Any) -> None:
        raise AssertionError(f"install ran {argv} on this machine")

    monkeypatch.setattr(install_module, "Layout", Sandboxed)
    monkeypatch.setattr(install_module, "run_setup_command", refuse)
    return sandbox


@pytest.mark.parametrize(
    "agentd_bin", ["/tmp/x/agentd", "/var/tmp/agentd", "/home/ann/.venv/bin/agentd", "/root/agentd", "/run/user/0/a"]
)
def test_an_agentd_the_units_cannot_see_is_refused(
    on_this_system: Path, capsys: pytest.CaptureFixture[str], agentd_bin: str
) -> None:
    assert main(["install", "--agent", "web", "--agentd-bin", agentd_bin]) == 2
    err = capsys.readouterr().err
    assert f"agentd at {agentd_bin} cannot be started by the units" in err and "PrivateTmp=/ProtectHome=" in err
    assert "--agentd-bin PATH" in err and len(err.strip().splitlines()) == 1
    assert not on_this_system.exists()


@pytest.mark.parametrize(
    ("agentd_bin", "expected"),
    [
        ("agentd", "--agentd-bin: expected an absolute path"),
        ("/opt/my agentd/agentd", "--agentd-bin: expected an absolute path"),
        ("/opt/agentd%i", "--agentd-bin: expected an absolute path"),
        ("/opt/nowhere/agentd", "--agentd-bin: /opt/nowhere/agentd is not an executable file"),
        ("/usr", "--agentd-bin: /usr is not an executable file"),
    ],
)
def test_a_bad_agentd_bin_is_refused(
    on_this_system: Path, capsys: pytest.CaptureFixture[str], agentd_bin: str, expected: str
) -> None:
    assert main(["install", "--agent", "web", "--agentd-bin", agentd_bin]) == 2
    assert expected in capsys.readouterr().err
    assert not on_this_system.exists()


def test_a_staging_root_only_warns_about_an_agentd_the_units_cannot_see(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install_agent(tmp_path, "web", "--agentd-bin", "/home/ann/agentd")
    assert "warning: the units run /home/ann/agentd, which they cannot see" in capsys.readouterr().err
    unit = (tmp_path / "etc/systemd/system/agentd-dispatch@.service").read_text()
    assert "ExecStart=/home/ann/agentd --config /etc/agentd/%i.toml dispatch" in unit


def test_an_agentd_linked_or_interpreted_from_a_hidden_folder_is_unreachable() -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("needs /dev/shm (a folder the units see)")
    with tempfile.TemporaryDirectory(dir="/tmp") as hidden, tempfile.TemporaryDirectory(dir="/dev/shm") as folder:
        target = Path(hidden) / "agentd"  # /tmp: PrivateTmp= hides it from the units
        target.write_text("#!/usr/bin/python3\n")
        script, link = Path(folder) / "agentd", Path(folder) / "link"
        script.write_text("#!/home/ann/.venv/bin/python\nfrom agentd.cli import main\n")
        link.symlink_to(target)
        assert "/home/ann/.venv/bin/python is under /home" in str(hidden_from_units(script))
        assert f"{target} is under /tmp" in str(hidden_from_units(link))
        script.write_text("#!/usr/bin/python3\n")
        assert hidden_from_units(script) is None


# 4. uninstall: not installed, purge confirmed, shared files with the last agent


def test_uninstalling_an_agent_that_is_not_installed_is_an_error(
    installed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(installed)
    assert main(["uninstall", "--root", str(installed), "--agent", "never"]) == 2
    assert f"agent 'never' is not installed (no {installed}/etc/agentd/never.toml)" in capsys.readouterr().err
    assert tree(installed) == before


def test_purge_without_yes_says_what_it_would_delete_and_deletes_nothing(
    installed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tree(installed)
    assert main(["uninstall", "--root", str(installed), "--agent", "demo", "--purge"]) == 2
    err = capsys.readouterr().err
    assert f"--purge deletes {installed}/etc/agentd/demo.toml" in err and f"{installed}/var/lib/agentd/demo" in err
    assert "add --yes to confirm" in err
    assert tree(installed) == before


def test_the_shared_units_go_with_the_last_agent_and_each_agents_users_file_with_it(installed: Path) -> None:
    install_agent(installed, "web")
    shared = [
        installed / "etc/systemd/system/agentd-dispatch@.service",
        installed / "etc/systemd/system/agentd-sensors@.service",
    ]
    assert main(["uninstall", "--root", str(installed), "--agent", "web", "--purge", "--yes"]) == 0
    assert all(path.is_file() for path in shared), "demo still uses them"
    assert not (installed / "etc/sysusers.d/agentd-web.conf").exists()
    assert (installed / "etc/sysusers.d/agentd-demo.conf").is_file()
    assert main(["uninstall", "--root", str(installed), "--agent", "demo", "--purge", "--yes"]) == 0
    assert not any(path.exists() for path in shared)


# 5. hardening: system-call filter, IPC clean-up, private mounts


def test_the_units_filter_system_calls_remove_ipc_and_keep_mounts_private() -> None:
    for name in ("agentd-dispatch@.service", "agentd-sensors@.service"):
        unit = (REPO / "units" / name).read_text()
        settings = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
        assert settings["RemoveIPC"] == "yes" and settings["PrivateMounts"] == "yes", name
        assert re.findall(r"^SystemCallFilter=(.*)$", unit, re.M)[0] == "@system-service", name
        assert settings["SystemCallErrorNumber"] == "EPERM", name


@pytest.mark.process
@pytest.mark.parametrize(
    ("unit", "exposure"), [("agentd-dispatch@demo.service", 2.6), ("agentd-sensors@demo.service", 1.7)]
)
def test_the_units_exposure_stays_at_the_measured_level(installed: Path, unit: str, exposure: float) -> None:
    """`systemd-analyze security` scores 0 (locked down) to 10; these were 4.0 and 3.2 before the filter."""
    path = installed / "etc/systemd/system" / unit  # the instance, read from its template beside it
    result = subprocess.run(
        [analyzer(), "security", "--offline=yes", "--no-pager", f"--threshold={round(exposure * 10)}", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout[-400:] + result.stderr


# 6. acceptance: two agents, two pairs of ports, four instantiated units that verify


@pytest.mark.process
def test_two_agents_get_distinct_ports_and_their_units_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AGENTD_METRICS__DISPATCH_LISTEN", "AGENTD_METRICS__SENSORS_LISTEN"):
        monkeypatch.delenv(name)  # config check below compares the ports the files name
    root = tmp_path / "root"
    install_agent(root, "web")
    install_agent(root, "api")
    assert "skipped" not in capsys.readouterr().err
    assert len({*ports_of(root, "web"), *ports_of(root, "api")}) == 4
    for agent in ("web", "api"):
        assert main(["config", "check", "--config", str(root / f"etc/agentd/{agent}.toml")]) == 0
    units = root / "etc/systemd/system"
    instances = [
        str(units / f"agentd-{service}@{agent}.{kind}")
        for service in ("dispatch", "sensors", "web")
        for agent in ("web", "api")
        for kind in ("service", "socket")  # each port's socket unit, as install wrote it
    ]
    result = subprocess.run([analyzer(), "verify", "--man=no", *instances], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


# --- the boundary (issue 22): two users per agent, folders only they may reach ------------------------


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_the_sysusers_file_makes_three_users_each_in_a_group_of_its_own(installed: Path) -> None:
    """Applied to a temp root by systemd-sysusers itself: three users, each in a group of its own; the
    services' user is a member of the run user's group (so what an attempt writes, the services read and
    remove) and of no other; the sensor user shares no group with the attempts (issue #38: a sensor in the
    services' group rewrote a running attempt's prompt and its result); the sensor user's home is where
    install makes the sensors' folder, 0700 and its own."""
    sysusers = shutil.which("systemd-sysusers")
    if sysusers is None:
        pytest.skip("systemd-sysusers is not installed on this machine")
    target = installed.parent / "target"
    (target / "etc").mkdir(parents=True)
    subprocess.run([sysusers, f"--root={target}", str(installed / "etc/sysusers.d/agentd-demo.conf")], check=True)
    users = {line.split(":")[0]: line.split(":") for line in (target / "etc/passwd").read_text().splitlines()}
    groups = {line.split(":")[0]: line.split(":") for line in (target / "etc/group").read_text().splitlines()}
    service, run, sensors = users["agentd-demo"], users["agentd-demo-run"], users["agentd-demo-sns"]
    assert len({service[2], run[2], sensors[2]}) == 3 and int(run[2]) != 0 and int(sensors[2]) != 0
    assert service[3] == groups["agentd-demo"][2]
    assert run[3] == groups["agentd-demo-run"][2] and sensors[3] == groups["agentd-demo-sns"][2]
    assert len({service[3], run[3], sensors[3]}) == 3
    members = {name: entry[3].split(",") if entry[3] else [] for name, entry in groups.items()}
    assert members["agentd-demo-run"] == ["agentd-demo"] and members["agentd-demo-sns"] == []
    assert members["agentd-demo"] == []
    assert run[6] == sensors[6] == service[6] == "/usr/sbin/nologin"
    tmpfiles = (installed / "etc/tmpfiles.d/agentd-demo.conf").read_text()
    assert f"d {sensors[5]} 0700 agentd-demo-sns agentd-demo-sns -" in tmpfiles.splitlines()


def test_the_folders_leave_the_state_dir_to_the_services_and_share_none_between_attempts_and_sensors(
    installed: Path,
) -> None:
    lines = (installed / "etc/tmpfiles.d/agentd-demo.conf").read_text().splitlines()
    folders = {line.split()[1]: line.split()[2:5] for line in lines if line.startswith("d ")}
    assert folders == {
        "/var/lib/agentd/demo": ["0700", "agentd-demo", "agentd-demo"],
        "/var/lib/agentd-run/demo": ["0711", "agentd-demo", "agentd-demo"],
        "/var/lib/agentd-run/demo/runs": ["0750", "agentd-demo", "agentd-demo-run"],
        "/var/lib/agentd-run/demo/workspace": ["0770", "agentd-demo-run", "agentd-demo-run"],
        "/var/lib/agentd-run/demo/sensors": ["0700", "agentd-demo-sns", "agentd-demo-sns"],
    }


def test_two_agents_share_no_writable_path(tmp_path: Path) -> None:
    for agent in ("alpha", "beta"):
        install_agent(tmp_path, agent)
    writable = {}
    for agent in ("alpha", "beta"):
        config = load_config(tmp_path / f"etc/agentd/{agent}.toml")
        lines = (tmp_path / f"etc/tmpfiles.d/agentd-{agent}.conf").read_text().splitlines()
        folders = {Path(line.split()[1]) for line in lines if line.startswith("d ")}
        writable[agent] = folders | {config.paths.state_dir, config.paths.workspace, config.paths.runs}
        assert config.dispatch.run_as == f"agentd-{agent}-run"
    assert not any(
        a == b or a.is_relative_to(b) or b.is_relative_to(a) for a in writable["alpha"] for b in writable["beta"]
    )


@pytest.mark.parametrize("name", ["a" * 22, "Arc", "1arc", "arc/x"])
def test_an_agent_name_its_users_could_not_hold_is_refused(tmp_path: Path, name: str, capsys: Any) -> None:
    assert main(["install", "--root", str(tmp_path), "--agent", name]) == 2
    assert "expected a lowercase name" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_a_root_the_system_refuses_is_one_line_and_install_can_run_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --root whose name is too long, or under a file: one line naming the agent, the root and why."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for root, why in ((tmp_path / ("r" * 300), "File name too long"), (a_file / "stage", "Not a directory")):
        capsys.readouterr()
        assert main(["install", "--root", str(root), "--agent", "demo"]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"agentd: cannot lay out agent demo under {root}: {why}"), line
        assert line.endswith(
            "install is safe to run again once that is fixed (what it wrote is kept, or written again if it differs)"
        )


def test_installing_again_over_an_older_toml_says_how_to_give_sensors_their_own_user(
    installed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A TOML an older install wrote has no [sensors] run_as, so sensors run as the attempts' user: install
    never edits the operator's TOML, but it makes the user and its home and says what to add."""
    toml = installed / "etc/agentd/demo.toml"
    text = toml.read_text()
    older = text.replace('\n[sensors]\nrun_as = "agentd-demo-sns"\n', "\n")
    assert "sensors" not in tomllib.loads(older) and tomllib.loads(older)["dispatch"]["run_as"] == "agentd-demo-run"
    toml.write_text(older)
    assert main(["install", "--root", str(installed), "--agent", "demo"]) == 0
    err = capsys.readouterr().err
    assert 'add run_as = "agentd-demo-sns" under [sensors]' in err and "restart agentd-sensors@demo" in err, err
    assert toml.read_text() == older, "the operator's TOML is never rewritten"
    assert "u agentd-demo-sns " in (installed / "etc/sysusers.d/agentd-demo.conf").read_text()
    toml.write_text(text)
    assert main(["install", "--root", str(installed), "--agent", "demo"]) == 0
    assert "under [sensors]" not in capsys.readouterr().err, "the control: a TOML that names it is not warned about"


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_purge_removes_a_workspace_nested_deeper_than_python_recurses(installed: Path) -> None:
    """The workspace is the attempts': 3,000 folders one in another made `uninstall --purge` end in a
    RecursionError traceback (shutil.rmtree recurses once per level), the agent half removed."""
    area = installed / "var/lib/agentd-run/demo"
    nest(area / "workspace", 3000)
    assert main(["uninstall", "--root", str(installed), "--agent", "demo", "--purge", "--yes"]) == 0
    assert not area.exists() and not (installed / "etc/agentd/demo.toml").exists()


# --- issue 52: a staged tree is for another machine ---------------------------------------------------


@contextlib.contextmanager
def listening(port: int) -> Iterator[None]:
    """Something listens on 127.0.0.1:port for the block: this socket, or whatever held it already."""
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
            sock.listen()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
        yield


def test_a_staged_tree_gets_the_default_ports_whatever_listens_on_this_machine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """This machine's listeners say nothing of the target's: every port here may be taken, the tree still gets
    9478/9479 and 9578; only another agent's TOML in the same tree moves them."""
    root = tmp_path / "root"
    with contextlib.ExitStack() as here:  # the defaults listen here (or something else already does)
        for port in (PORT_BASE, PORT_BASE + 1, 9578):
            here.enter_context(listening(port))
        install_agent(root, "web")
        install_agent(root, "api")
    assert ports_of(root, "web") == (PORT_BASE, PORT_BASE + 1) and ports_of(root, "api") == (9480, 9481)
    web = tomllib.loads((root / "etc/agentd/web.toml").read_text())["web"]["listen"]
    assert web == "127.0.0.1:9578"
    assert "(staged: the tree's own agents moved them, not this machine)" in capsys.readouterr().out


def test_config_check_warns_of_a_staged_tree_without_its_users_and_refuses_a_live_one(
    installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A staged tree's run user is made on the target: config check says, on stderr, that no attempt could start
    here and where to check; the same config anywhere else is refused (exit 2), never a plain "ok"."""
    staged = installed / "etc/agentd/demo.toml"
    capsys.readouterr()
    assert main(["config", "check", "--config", str(staged)]) == 0
    err = capsys.readouterr().err
    assert "warning: no attempt can start: dispatch.run_as: no user 'agentd-demo-run'" in err
    assert "this is a staged tree (`agentd install --root`)" in err and "run config check there" in err
    live = tmp_path / "live"
    live.mkdir()
    config = write_config_with_run_as(live, "agentd-nosuch-run")
    assert main(["config", "check", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"agentd: {config}: no attempt can start: dispatch.run_as: no user 'agentd-nosuch-run'")
    assert len(err.splitlines()) == 1


def write_config_with_run_as(directory: Path, user: str) -> Path:
    from support import write_config

    def mutate(raw: dict[str, Any]) -> None:
        raw["dispatch"]["run_as"] = user
        raw["paths"]["run_dir"] = str(directory / "runs")

    return write_config(directory, mutate)
