"""An attempt folder as one object (docs/backup-and-archive.md, "What is in the bucket"): a plain tar of its regular
files, the same bytes for the same folder (sorted, no times, no owners), so an upload cut short and made again
writes what the first would have. Unpacked only as it was packed: plain files with a plain name, into a folder of
the auditor's, never a link, a path or a device (an object in the bucket is text someone else chose)."""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

from agentd.evidence import MAX_MANIFEST_BYTES
from agentd.process.files import Refused, held_folder, read_beneath

MAX_FILE_BYTES = 64 * 1024 * 1024  # larger than any evidence file agentd writes (logs are capped far below)
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def pack_folder(root: Path) -> bytes:
    """The folder's regular files (no link followed, nothing beneath a subfolder) as a deterministic tar.

    :raises FileNotFoundError: there is no folder. :raises Refused: it is a link."""
    out = io.BytesIO()
    with held_folder(root) as folder, tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        with os.scandir(folder) as listing:
            names = sorted(e.name for e in listing if e.is_file(follow_symlinks=False) and NAME.match(e.name))
        for name in names:
            try:
                data = read_beneath(folder, name, max(MAX_FILE_BYTES, MAX_MANIFEST_BYTES)).data
            except (FileNotFoundError, Refused):
                continue  # gone, or turned into something else since the listing: verify names it
            member = tarfile.TarInfo(name)
            member.size, member.mode, member.mtime = len(data), 0o400, 0
            tar.addfile(member, io.BytesIO(data))
    return out.getvalue()


def unpack_folder(body: bytes, target: Path) -> list[str]:
    """Write the tar's plain files into `target` (made 0700; files 0600); what was refused, one line each."""
    refused = []
    os.makedirs(target, mode=0o700, exist_ok=False)
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
            for member in tar:
                refused += _unpack_member(tar, member, target)
    except tarfile.TarError as exc:
        refused.append(f"not a tar agentd writes ({exc})")
    return refused


def _unpack_member(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> list[str]:
    if not member.isreg() or not NAME.match(member.name) or member.size > MAX_FILE_BYTES:
        return [f"member {member.name!r}: not a plain evidence file (a link, a path, a device?)"]
    source = tar.extractfile(member)
    assert source is not None  # a regular member has content
    try:
        fd = os.open(target / member.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return [f"member {member.name!r}: in the tar twice"]
    with os.fdopen(fd, "wb") as handle:
        handle.write(source.read())
    return []
