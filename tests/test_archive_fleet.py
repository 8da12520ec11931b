"""The witnessed head in the fleet's PostgreSQL (docs/backup-and-archive.md, "Witnessed head"): every head the
archiver witnesses is also a row of fleet_witnessed_heads, never changed, and `agentd evidence verify
--against-fleet` reports a rolled-back state dir from those rows alone."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rig import Rig
from s3server import S3Server, credentials_file, start_s3
from test_archive import archived, cli, rolled_back

from agentd.store import FleetQueue

pytestmark = pytest.mark.process  # an S3 server of its own (moto), a real child process


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    server = start_s3()
    yield server
    server.stop()


@pytest.mark.asyncio
async def test_against_the_fleet_a_rolled_back_state_dir_is_reported(
    rig_factory: Callable[..., Rig],
    s3: S3Server,
    queue: FleetQueue,
    dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    dsn_file = tmp_path / "fleet.dsn"
    dsn_file.write_text(dsn + "\n")
    dsn_file.chmod(0o600)
    archive = archived(s3.bucket("fleet-witness"), s3.url, credentials_file(tmp_path / "s3.env"))

    def mutate(raw: dict[str, Any]) -> None:
        archive(raw)
        raw["fleet"] = {"dsn_file": str(dsn_file)}

    rig, kept = await rolled_back(rig_factory(mutate), tmp_path, 3, 20)
    heads = queue.witnessed_heads(rig.config.agent.agent_id)
    assert len(heads) == 3 and heads[-1][0] == kept[0]  # the first head, and one per round after the copy
    assert not queue.witness_head(rig.config.agent.agent_id, heads[0][0], "0" * 64)  # never overwritten
    assert queue.witnessed_heads(rig.config.agent.agent_id) == heads
    against = cli(capsys, rig, "evidence", "verify", "--against-fleet", "--json")
    assert against.code == 1, against.out + against.err
    shown = json.loads(against.out)
    assert shown["witnessed"]["rollback"] is True and shown["witnessed"]["heads"]["fleet"]["sequence"] == heads[0][0]
    assert any(f["where"] == f"event {kept[0] + 1}" for f in shown["findings"]), shown["findings"]
