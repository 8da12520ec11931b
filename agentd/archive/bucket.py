"""The one S3 client agentd uses (boto3, the `archive` extra; docs/decisions.md, "The evidence archive (issue 54)"):
put with metadata and an object-lock retention, put only if absent, get bounded, list by prefix. Every failure of
the service or the network is ArchiveUnavailable, saying which request and why; boto3's own retries are off (the
archiver's backoff decides when to try again, on the injected clock)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any, Literal

from agentd import frozen_value
from agentd.archive.location import Location
from agentd.errors import AgentdError, InputError

MAX_OBJECT_BYTES = 256 * 1024 * 1024  # an attempt folder is a few MB at most (its logs are capped)


class ArchiveUnavailable(AgentdError):
    """The bucket cannot be reached or refused a request: retried later, never an attempt lost."""


@frozen_value
class Retention:
    mode: Literal["COMPLIANCE", "GOVERNANCE"]
    until: datetime


@frozen_value
class Stored:
    body: bytes
    metadata: dict[str, str]


class Bucket:
    """An agent's archive on one S3-compatible service, under `location.prefix` + `agent` + '/'."""

    def __init__(
        self, location: Location, agent: str, credentials: Mapping[str, str] | None, *, timeout_s: float = 30.0
    ) -> None:
        try:
            import boto3
            from botocore.config import Config as BotoConfig
        except ImportError:
            raise InputError("the archive needs boto3: pip install 'agentd[archive]'") from None

        self.location, self.agent = location, agent
        self.root = location.agent_prefix(agent)
        keys = {}
        if credentials is not None:  # else boto3's own chain (an auditor's environment, ~/.aws)
            keys = {
                "aws_access_key_id": credentials["AWS_ACCESS_KEY_ID"],
                "aws_secret_access_key": credentials["AWS_SECRET_ACCESS_KEY"],
                "aws_session_token": credentials.get("AWS_SESSION_TOKEN"),
            }
        settings = BotoConfig(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"max_attempts": 1, "mode": "standard"},
            s3={"addressing_style": "path"} if location.endpoint_url else {},
            max_pool_connections=32,
        )
        self._client = boto3.session.Session().client(
            "s3", endpoint_url=location.endpoint_url, region_name=location.region, config=settings, **keys
        )

    def put(
        self,
        key: str,
        body: bytes,
        metadata: Mapping[str, str],
        retention: Retention | None = None,
        *,
        only_if_absent: bool = False,
    ) -> bool:
        """Write the object (with its retention, if any); `only_if_absent`: False, writing nothing, if it exists."""
        extra: dict[str, Any] = {}
        if retention is not None:
            extra = {"ObjectLockMode": retention.mode, "ObjectLockRetainUntilDate": retention.until}
        if only_if_absent:
            extra["IfNoneMatch"] = "*"
        try:
            args = {"Bucket": self.location.bucket, "Key": self.root + key, "Body": body, "Metadata": dict(metadata)}
            self._call("PutObject", key, **args, **extra)
        except _Refused as exc:
            if only_if_absent and exc.code in ("PreconditionFailed", "412"):
                return False
            raise ArchiveUnavailable(f"PutObject {self.root + key}: {exc}") from None
        return True

    def get(self, key: str) -> Stored | None:
        """The object's bytes (up to MAX_OBJECT_BYTES) and metadata; None if there is none."""
        try:
            found = self._call("GetObject", key, Bucket=self.location.bucket, Key=self.root + key)
        except _Refused as exc:
            if exc.code in ("NoSuchKey", "404"):
                return None
            raise ArchiveUnavailable(f"GetObject {self.root + key}: {exc}") from None
        if int(found.get("ContentLength") or 0) > MAX_OBJECT_BYTES:
            found["Body"].close()
            raise ArchiveUnavailable(f"{self.root + key}: over {MAX_OBJECT_BYTES:,} bytes, far more than agentd writes")
        with found["Body"] as stream:
            body = stream.read(MAX_OBJECT_BYTES + 1)
        return Stored(body, dict(found.get("Metadata") or {}))

    def keys(self, under: str) -> Iterator[str]:
        """Every key under `under` (relative to the agent's prefix), in S3's (lexical) order."""
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.location.bucket, "Prefix": self.root + under}
            if token:
                args["ContinuationToken"] = token
            try:
                page = self._call("ListObjectsV2", under, **args)
            except _Refused as exc:
                raise ArchiveUnavailable(f"ListObjectsV2 {self.root + under}: {exc}") from None
            for entry in page.get("Contents", []):
                yield str(entry["Key"])[len(self.root) :]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def versions(self, key: str) -> list[str]:
        """The version ids of `key` (a versioned bucket keeps every write), newest first."""
        try:
            page = self._call("ListObjectVersions", key, Bucket=self.location.bucket, Prefix=self.root + key)
        except _Refused as exc:
            raise ArchiveUnavailable(f"ListObjectVersions {self.root + key}: {exc}") from None
        return [str(v["VersionId"]) for v in page.get("Versions", []) if v["Key"] == self.root + key]

    def delete(self, key: str, version_id: str | None = None) -> None:
        """Delete the object (a version of it): what object lock refuses while its retention lasts."""
        args: dict[str, Any] = {"Bucket": self.location.bucket, "Key": self.root + key}
        if version_id:
            args["VersionId"] = version_id
        try:
            self._call("DeleteObject", key, **args)
        except _Refused as exc:
            raise ArchiveUnavailable(f"DeleteObject {self.root + key}: {exc}") from None

    def _call(self, operation: str, key: str, **args: Any) -> Any:
        """One request; the service's refusal becomes _Refused (its code), a network failure ArchiveUnavailable."""
        from botocore.exceptions import BotoCoreError, ClientError

        method = {
            "PutObject": self._client.put_object,
            "GetObject": self._client.get_object,
            "ListObjectsV2": self._client.list_objects_v2,
            "ListObjectVersions": self._client.list_object_versions,
            "DeleteObject": self._client.delete_object,
        }[operation]
        try:
            return method(**args)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise _Refused(str(error.get("Code", "")), str(error.get("Message", "") or exc)) from None
        except BotoCoreError as exc:  # could not connect, timed out, the connection was cut
            raise ArchiveUnavailable(f"{operation} {self.root + key}: {exc}") from None


class _Refused(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code
