"""`agentd install` and the console: its own unit (verified and hardened as the other two), its own port
per agent, and `agentd config check` refusing a console port another installed agent names."""

from __future__ import annotations

import re
import socket
import subprocess
import tomllib
from pathlib import Path

import pytest
from support import REPO
from test_install import analyzer, install_agent, ports_of

from agentd.cli import main
from agentd.install.ports import LOOPBACK, WEB_PORT_BASE, free_port, port_is_free

UNITS = Path("etc/systemd/system")


def web_port(root: Path, agent: str) -> int:
    listen = tomllib.loads((root / f"etc/agentd/{agent}.toml").read_text())["web"]["listen"]
    assert listen.startswith(f"{LOOPBACK}:"), "loopback by default"
    return int(listen.rpartition(":")[2])


def test_a_console_port_another_agent_names_or_something_listens_on_is_skipped() -> None:
    assert free_port(set(), is_free=lambda port: True) == WEB_PORT_BASE
    assert free_port({9578, 9579}, is_free=lambda port: port != 9580) == 9581
    with socket.socket() as held:
        held.bind((LOOPBACK, 0))
        held.listen()
        taken = held.getsockname()[1]
        assert not port_is_free(taken)
        assert free_port(set(), start=taken) > taken


def test_each_agent_gets_its_own_console_port_and_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "root"
    install_agent(root, "one")
    install_agent(root, "two")
    out = capsys.readouterr().out
    ports = {agent: (*ports_of(root, agent), web_port(root, agent)) for agent in ("one", "two")}
    assert len({*ports["one"], *ports["two"]}) == 6, ports
    assert f"console   {ports['two'][2]} on 127.0.0.1" in out
    assert "agentd-web@two.socket agentd-dispatch@two.socket agentd-sensors@two.socket" in out
    assert "agentd-dispatch@two agentd-sensors@two agentd-web@two\n" in out
    unit = (root / UNITS / "agentd-web@.service").read_text()
    assert "ExecStart=/" in unit and unit.rstrip().endswith("WantedBy=multi-user.target")
    for agent in ("one", "two"):
        assert main(["config", "check", "--config", str(root / f"etc/agentd/{agent}.toml")]) == 0


def test_config_check_refuses_a_console_port_another_installed_agent_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AGENTD_METRICS__DISPATCH_LISTEN", "AGENTD_METRICS__SENSORS_LISTEN", "AGENTD_WEB__LISTEN"):
        monkeypatch.delenv(name)  # the addresses in the files are checked here, and nothing binds them
    root = tmp_path / "root"
    install_agent(root, "one")
    install_agent(root, "two")
    one, two = root / "etc/agentd/one.toml", root / "etc/agentd/two.toml"
    theirs, own = web_port(root, "one"), web_port(root, "two")
    two.write_text(two.read_text().replace(f'listen = "127.0.0.1:{own}"', f'listen = "127.0.0.1:{theirs}"'))
    capsys.readouterr()
    assert main(["config", "check", "--config", str(two)]) == 2
    err = capsys.readouterr().err
    assert f"{two}: web.listen: 127.0.0.1:{theirs} is also {one}'s web.listen" in err
    dispatch = ports_of(root, "one")[0]
    two.write_text(two.read_text().replace(f'listen = "127.0.0.1:{theirs}"', f'listen = "127.0.0.1:{dispatch}"'))
    assert main(["config", "check", "--config", str(two)]) == 2
    assert f"is also {one}'s metrics.dispatch_listen" in capsys.readouterr().err
    one.write_text(one.read_text().replace("[metrics]\n", "[metrics]\nenabled = false\n"))
    assert main(["config", "check", "--config", str(two)]) == 0, "a disabled endpoint listens on nothing"


def test_config_check_refuses_a_console_on_the_agents_own_metrics_port(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AGENTD_METRICS__DISPATCH_LISTEN", "AGENTD_WEB__LISTEN"):
        monkeypatch.delenv(name)  # the file's own addresses are checked here
    root = tmp_path / "root"
    install_agent(root, "one")
    toml = root / "etc/agentd/one.toml"
    dispatch = ports_of(root, "one")[0]
    toml.write_text(re.sub(r'(\[web\]\nlisten = )"[^"]+"', rf'\1"127.0.0.1:{dispatch}"', toml.read_text()))
    capsys.readouterr()
    assert main(["config", "check", "--config", str(toml)]) == 2
    assert "web.listen: expected a port of its own" in capsys.readouterr().err


def test_the_web_unit_carries_the_operational_contract() -> None:
    unit = (REPO / "units" / "agentd-web@.service").read_text()
    settings = dict(re.findall(r"^(\w+)=(.*)$", unit, re.M))
    assert settings["ExecStartPre"].endswith("migrate") and settings["ExecStart"].endswith(" web")
    assert settings["Restart"] == "on-failure" and settings["User"] == "agentd-%i"
    assert settings["RestartPreventExitStatus"] == "2"
    assert settings["CapabilityBoundingSet"] == "" and settings["AmbientCapabilities"] == ""
    assert settings["ReadWritePaths"] == "/var/lib/agentd/%i", "the run area is not the console's"
    for hardening in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "ProtectHome", "RestrictAddressFamilies",
                      "RemoveIPC", "PrivateMounts"):  # fmt: skip
        assert settings[hardening], hardening
    # It must see real uids to refuse the agents' run users (test_web_peers.py says why): no PrivateUsers=.
    assert "PrivateUsers" not in settings and "AF_NETLINK" in settings["RestrictAddressFamilies"].split()


@pytest.mark.process
def test_systemd_analyze_verifies_the_web_unit_and_rates_it_at_most_its_measured_exposure(tmp_path: Path) -> None:
    """`systemd-analyze security --offline=yes` rates it 1.3 (the sensor service 1.7, the dispatcher 2.6):
    1.1 before netlink and without PrivateUsers=, which "Who may connect" needs (docs/web.md)."""
    root = tmp_path / "root"
    install_agent(root, "demo")
    instance = root / UNITS / "agentd-web@demo.service"
    verify = subprocess.run(
        [analyzer(), "verify", "--man=no", str(instance)], capture_output=True, text=True, timeout=60
    )
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr
    security = subprocess.run(
        [analyzer(), "security", "--offline=yes", "--no-pager", "--threshold=13", str(instance)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert security.returncode == 0, security.stdout[-400:] + security.stderr


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        # Agent two's run user is agent one's: each agent's attempts would reach the other's workspace.
        (('run_as = "agentd-two-run"', 'run_as = "agentd-one-run"'), "dispatch.run_as: 'agentd-one-run' is also"),
        # Agent two's sensors run as agent one's attempts, or as one's sensors, or two's attempts as one's sensors.
        (('run_as = "agentd-two-sns"', 'run_as = "agentd-one-run"'), "sensors.run_as: 'agentd-one-run' is also"),
        (('run_as = "agentd-two-sns"', 'run_as = "agentd-one-sns"'), "sensors.run_as: 'agentd-one-sns' is also"),
        (('run_as = "agentd-two-run"', 'run_as = "agentd-one-sns"'), "dispatch.run_as: 'agentd-one-sns' is also"),
        # Agent two's workspace on agent one's state dir: two's run user could rename what is there.
        (
            ('workspace = "/var/lib/agentd-run/two/workspace"', 'workspace = "/var/lib/agentd/one"'),
            "paths.workspace: /var/lib/agentd/one overlaps",
        ),
        # One workspace for both: each service makes it its own run user's, each agent sees the other's work.
        (
            ('workspace = "/var/lib/agentd-run/two/workspace"', 'workspace = "/var/lib/agentd-run/one/workspace"'),
            "paths.workspace: /var/lib/agentd-run/one/workspace overlaps",
        ),
        # Agent two's state dir inside agent one's workspace: one's attempts could do the same to two.
        (
            ('state_dir = "/var/lib/agentd/two"', 'state_dir = "/var/lib/agentd-run/one/workspace/two"'),
            "paths.state_dir: /var/lib/agentd-run/one/workspace/two is inside",
        ),
    ],
    ids=[
        "one run user",
        "a sensor user that is another's run user",
        "one sensor user",
        "a run user that is another's sensor user",
        "a workspace over a state dir",
        "one workspace",
        "a state dir in a workspace",
    ],
)
def test_config_check_and_the_services_refuse_another_installed_agents_run_user_or_folders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: tuple[str, str], problem: str
) -> None:
    root = tmp_path / "root"
    install_agent(root, "one")
    install_agent(root, "two")
    one, two = root / "etc/agentd/one.toml", root / "etc/agentd/two.toml"
    assert edit[0] in two.read_text()
    two.write_text(two.read_text().replace(edit[0], edit[1]))
    capsys.readouterr()
    assert main(["config", "check", "--config", str(two)]) == 2
    err = capsys.readouterr().err
    assert f"{two}: {problem}" in err and str(one) in err, err
    assert main(["dispatch", "--until-idle", "--config", str(two)]) == 2  # before it makes or opens anything
    assert problem in capsys.readouterr().err
    two.write_text(two.read_text().replace(edit[1], edit[0]))
    assert main(["config", "check", "--config", str(two)]) == 0, "control: as installed, they share nothing"
