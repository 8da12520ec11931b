"""Where an agent's archive lives and how its objects are named (docs/backup-and-archive.md, "What is in the
bucket"): `s3://BUCKET/PREFIX` and, under PREFIX + the agent's name, `attempts/TASK/ATTEMPT.tar`,
`events/FIRST-LAST.jsonl` and `heads/SEQUENCE.json`. Keys are parsed back strictly: a name that is not one agentd
writes is never turned into a path."""

from __future__ import annotations

import re

from agentd import frozen_value
from agentd.config.archive import ArchiveSection, bucket_problem, endpoint_problem, prefix_problem
from agentd.edge import quoted

ATTEMPT_KEY = re.compile(r"^attempts/([1-9][0-9]{0,18})/([A-Za-z0-9][A-Za-z0-9._:-]{0,127})\.tar$")
EVENTS_KEY = re.compile(r"^events/([0-9]{20})-([0-9]{20})\.jsonl$")
HEAD_KEY = re.compile(r"^heads/([0-9]{20})\.json$")
AGENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


@frozen_value
class Location:
    """A bucket on an S3-compatible service and the key prefix agentd's archives are under."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str = "us-east-1"

    @classmethod
    def of(cls, section: ArchiveSection) -> Location:
        assert section.bucket is not None
        return cls(section.bucket, section.prefix, section.endpoint_url, section.region)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def agent_prefix(self, agent: str) -> str:
        return f"{self.prefix}{agent}/"


def parse_archive_url(text: str, endpoint_url: str | None = None, region: str = "us-east-1") -> Location:
    """`s3://BUCKET` or `s3://BUCKET/PREFIX/` (the prefix's segments as [archive] prefix takes them).

    :raises ValueError: what was expected and what was found, in one line."""
    if not text.startswith("s3://"):
        raise ValueError(f"expected s3://BUCKET[/PREFIX/], found {quoted(text)}")
    bucket, _, prefix = text.removeprefix("s3://").partition("/")
    if problem := bucket_problem(bucket):
        raise ValueError(problem)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if problem := prefix_problem(prefix):
        raise ValueError(problem)
    if endpoint_url is not None and (problem := endpoint_problem(endpoint_url)):
        raise ValueError(problem)
    return Location(bucket, prefix, endpoint_url, region)


def agent_problem(agent: str) -> str | None:
    return None if AGENT.match(agent) else f"expected an agent's name (its agent_id), found {quoted(agent)}"


def attempt_key(task_id: int, attempt_id: str) -> str:
    return f"attempts/{task_id}/{attempt_id}.tar"


def events_key(first: int, last: int) -> str:
    return f"events/{first:020d}-{last:020d}.jsonl"


def head_key(sequence: int) -> str:
    """One object per head, named by its sequence: a later head never overwrites an earlier one."""
    return f"heads/{sequence:020d}.json"


def parsed_attempt_key(key: str) -> tuple[int, str] | None:
    """(task id, attempt id) of a key attempt_key wrote, else None."""
    match = ATTEMPT_KEY.match(key)
    return (int(match.group(1)), match.group(2)) if match else None


def parsed_events_key(key: str) -> tuple[int, int] | None:
    match = EVENTS_KEY.match(key)
    if match is None or int(match.group(1)) > int(match.group(2)):
        return None
    return int(match.group(1)), int(match.group(2))


def parsed_head_key(key: str) -> int | None:
    match = HEAD_KEY.match(key)
    return int(match.group(1)) if match else None
