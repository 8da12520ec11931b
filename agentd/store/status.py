"""What each running service says about itself (its STATUS= line and metrics URL), refreshed
every few seconds; not events: it changes too often to belong in the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd.process.procs import ProcessIdentity
from agentd.store.base import StoreBase, ts
from agentd.store.plain import boundary_waiver


class StatusVerbs(StoreBase):
    def report_service_status(
        self,
        service: str,
        me: ProcessIdentity,
        status: str,
        metrics_url: str | None,
        started_at: datetime,
        now: datetime,
    ) -> tuple[int, str] | None:
        """The service's line, with who it is (pid, its start time, host, boot): `agentd status` calls
        it live only while that very process runs. Returns the event chain's head as this durable
        transaction found it: durable when it returns, so a service may publish it outside the database
        (a head read after a commit that skipped its fsync could be lost to a power cut)."""
        with self.transaction():
            self.tx.execute(
                """INSERT INTO service_status (service, pid, pid_started, host, boot_id, status, metrics_url,
                       started_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                   ON CONFLICT (service) DO UPDATE SET pid = excluded.pid, pid_started = excluded.pid_started,
                       host = excluded.host, boot_id = excluded.boot_id, status = excluded.status,
                       metrics_url = excluded.metrics_url, started_at = excluded.started_at,
                       updated_at = excluded.updated_at""",
                (service, me.pid, me.started, me.host, me.boot_id, status, metrics_url, ts(started_at), ts(now)),
            )
            head = self.tx.execute("SELECT sequence, hash FROM events ORDER BY sequence DESC LIMIT 1").fetchone()
        return (head[0], head[1]) if head else None

    def boundary_waiver(self) -> tuple[str, dict[str, Any]] | None:
        """The newest dispatch_boundary_waived event's time and payload (its partial index: migration 0017)."""
        return boundary_waiver(self.tx)

    def service_statuses(self) -> list[dict[str, Any]]:
        rows = self.tx.execute("SELECT * FROM service_status ORDER BY service").fetchall()
        return [dict(row) for row in rows]
