"""A provider's rate limits until their reset (docs/gateway.md, "Quotas and resets"): the outcome commit of an
attempt the provider turned away records its credential's reset; the claim leaves out every task that would
run on an adapter using that credential until then, and `agentd status` says what waits for which reset."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from agentd.clock import stored_ts
from agentd.records import CredentialGroup, ProviderReset
from agentd.store.base import StoreBase, Tx, ts
from agentd.store.columns import RESTS_ON

# A task that would run on an adapter whose credential rests now: store/columns.py RESTS_ON (the plain readers
# ask it too, for each task's state). No resting credential: an empty table, one look.
RESTING = f"EXISTS (SELECT 1 FROM provider_resets r WHERE r.until > :now AND ({RESTS_ON}))"


def record_reset(tx: Tx, reset: ProviderReset, now: datetime) -> None:
    """The credential rests until `reset.until` (a later reset of the same credential replaces it)."""
    group = reset.group
    tx.execute(
        """INSERT INTO provider_resets (credential, adapters, task_types, open_task_types, profiles, until, reason,
               recorded_at, fleet_credential) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
           ON CONFLICT (credential) DO UPDATE SET adapters = excluded.adapters, task_types = excluded.task_types,
               open_task_types = excluded.open_task_types, profiles = excluded.profiles,
               until = MAX(until, excluded.until), reason = excluded.reason, recorded_at = excluded.recorded_at,
               fleet_credential = COALESCE(excluded.fleet_credential, fleet_credential)""",
        (
            group.credential,
            json.dumps(sorted(group.adapters)),
            json.dumps(sorted(group.task_types)),
            json.dumps(sorted(group.open_task_types)),
            json.dumps(sorted(group.profiles)),
            ts(reset.until),
            reset.reason[:2000],
            ts(now),
            reset.fleet_credential,
        ),
    )


def _reset(row: Any) -> ProviderReset:
    credential, adapters, types, open_types, profiles, until, reason, fleet_credential = row
    group = CredentialGroup(credential, *(tuple(json.loads(v)) for v in (adapters, types, open_types, profiles)))
    return ProviderReset(group, stored_ts(until), reason, fleet_credential)


class ResetVerbs(StoreBase):
    def resting_credentials(self, now: datetime) -> list[ProviderReset]:
        """The credentials whose provider's reset is still ahead, the soonest first."""
        rows = self.tx.execute(
            """SELECT credential, adapters, task_types, open_task_types, profiles, until, reason, fleet_credential
               FROM provider_resets WHERE until > ? ORDER BY until""",
            (ts(now),),
        ).fetchall()
        return [_reset(row) for row in rows]

    def record_provider_reset(self, reset: ProviderReset, now: datetime) -> None:
        """A reset another agent of the fleet heard for a credential this agent's adapters use (docs/fleet.md)."""
        with self.transaction():
            record_reset(self.tx, reset, now)
