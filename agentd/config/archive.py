"""[archive]: the evidence archive off the VM (docs/backup-and-archive.md, "Archive"): an S3-compatible bucket that
every sealed attempt folder and the witnessed chain head go to. Off unless `bucket` is set; it needs the `archive`
extra (boto3). Each value is checked here on its own; the credentials file's mode and content are checked where the
config is loaded (agentd/work/validation.py), and read again at every connect (a rotated key needs no restart)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentd.edge import quoted

# S3's bucket naming rules (3-63 characters: lowercase letters, digits, dots and hyphens, a letter or digit at each
# end, no two dots together, not an IPv4 address): what AWS, MinIO and Ceph RGW all accept.
BUCKET = re.compile(r"^(?!\d+\.\d+\.\d+\.\d+$)(?!.*\.\.)[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# A key prefix of path segments, each letters, digits and `._-` (not `.` or `..`): it can never name a folder
# outside the archive's own when an auditor downloads, and never needs escaping in a URL.
PREFIX = re.compile(r"^(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}/){0,8}$")
ENDPOINT = re.compile(r"^https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?/?$|^https?://\[[0-9A-Fa-f:]+\](?::[0-9]{1,5})?/?$")
REGION = re.compile(r"^[a-z0-9-]{1,40}$")


def bucket_problem(name: str) -> str | None:
    """Why `name` is not an S3 bucket name, or None."""
    if BUCKET.match(name):
        return None
    return f"expected an S3 bucket name (3-63 of a-z 0-9 . -, a letter or digit at each end), found {quoted(name)}"


def prefix_problem(prefix: str) -> str | None:
    """Why `prefix` is not a key prefix agentd writes under (`''`, or segments each ending in `/`), or None."""
    if PREFIX.match(prefix) and not any(part in (".", "..") for part in prefix.split("/")):
        return None
    return (
        "expected '' or path segments of letters, digits and ._- each ending in '/' (e.g. 'agents/'), "
        f"found {quoted(prefix)}"
    )


def endpoint_problem(url: str) -> str | None:
    if ENDPOINT.match(url):
        port = url.rstrip("/").rsplit(":", 1)[-1]
        if not port.isdigit() or 0 < int(port) < 65536:
            return None
    return f"expected http(s)://HOST[:PORT] of an S3-compatible service, found {quoted(url)}"


class ArchiveSection(BaseModel):
    """[archive]: see the module's docstring."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    bucket: str | None = Field(default=None, description="the bucket's name; none: no archive")
    endpoint_url: str | None = Field(
        default=None, description="an S3-compatible service (MinIO, Ceph RGW: http(s)://HOST:PORT); none: AWS S3"
    )
    prefix: str = Field(default="", description="key prefix inside the bucket ('' or segments ending in '/')")
    region: str = Field(default="us-east-1", description="the bucket's region")
    credentials_file: Path | None = Field(
        default=None,
        description="a file only its owner can read (0600) with AWS_ACCESS_KEY_ID=… and AWS_SECRET_ACCESS_KEY=… "
        "(AWS_SESSION_TOKEN=… optional) lines",
    )
    retention_days: int = Field(
        default=0,
        ge=0,
        le=36_500,
        description="object lock: each object is written to be kept this long (the bucket needs object lock on); "
        "0: written without a retention date",
    )
    lock_mode: Literal["COMPLIANCE", "GOVERNANCE"] = Field(
        default="COMPLIANCE",
        description="COMPLIANCE: no one can delete or shorten it, root included; GOVERNANCE: a user with the "
        "bypass permission can",
    )
    head_interval_s: float = Field(
        default=60.0, ge=1, le=86_400, description="the chain head is witnessed at most this often (when it moved)"
    )
    poll_s: float = Field(default=2.0, gt=0, le=3600, description="how often the queue of sealed folders is looked at")
    timeout_s: float = Field(default=30.0, gt=0, le=600, description="one request's connect and read timeout")
    concurrency: int = Field(default=4, ge=1, le=32, description="uploads at once")

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: str | None) -> str | None:
        if value is not None and (problem := bucket_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if problem := prefix_problem(value):
            raise ValueError(problem)
        return value

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and (problem := endpoint_problem(value)):
            raise ValueError(problem)
        return value

    @field_validator("region")
    @classmethod
    def _region(cls, value: str) -> str:
        if not REGION.match(value):
            raise ValueError(f"expected a region name such as us-east-1, found {quoted(value)}")
        return value

    @model_validator(mode="after")
    def _credentials_with_bucket(self) -> ArchiveSection:
        if self.bucket is not None and self.credentials_file is None:
            raise ValueError(
                "a bucket needs credentials_file: a 0600 file with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            )
        return self

    @property
    def enabled(self) -> bool:
        return self.bucket is not None
