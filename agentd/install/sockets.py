"""An agent's socket units (units/agentd-port.socket.in): one per port its TOML names, so systemd binds the
port at boot, before any service of any agent starts, and holds it across the service's restarts; no
other user on the VM, an attempt among them, can take it meanwhile and answer in the service's place
(agentd/process/activation.py takes the socket over; docs/install-and-deploy.md, "Ports held by systemd")."""

from __future__ import annotations

from pathlib import Path

from agentd.config.addresses import ip_of, listen_parts
from agentd.install.ports import enabled_listens, metrics_of, web_of
from agentd.resources import data_dir

SERVICES = ("dispatch", "sensors", "web")
WHAT = {"web": "console and API", "dispatch": "dispatcher metrics", "sensors": "sensor service metrics"}


def socket_names(agent: str) -> list[str]:
    return [f"agentd-{service}@{agent}.socket" for service in SERVICES]


def socket_units(config: Path, units_dir: Path) -> dict[Path, str | None]:
    """Each of the agent's socket unit files: the text to write, or None where that port is off
    ([web] enabled or [metrics] enabled false) or is no address systemd can bind before the service
    (a host name, port 0: then the service binds it itself)."""
    listens = enabled_listens(metrics_of(config), web_of(config))
    template = (data_dir("units") / "agentd-port.socket.in").read_text(encoding="utf-8")
    found: dict[Path, str | None] = {}
    for service in ("web", "dispatch", "sensors"):  # the console's first, as install prints them
        key = "web.listen" if service == "web" else f"metrics.{service}_listen"
        listen = listens.get(key)
        # A metrics port is stopped with its service, so a scrape never starts a service stopped on purpose.
        stop_with = "" if service == "web" else f"PartOf=agentd-{service}@%i.service\n"
        text = template.format(
            service=service, key=key, what=WHAT[service], listen=listen, stop_with=stop_with, docs=data_dir("docs")
        )
        found[units_dir / f"agentd-{service}@{config.stem}.socket"] = text if _bindable(listen) else None
    return found


def _bindable(listen: str | None) -> bool:
    """An IP address (IPv6 in brackets) and a port other than 0: what ListenStream= binds at boot."""
    if listen is None:
        return False
    host, port = listen_parts(listen)
    return ip_of(host) is not None and port != 0
