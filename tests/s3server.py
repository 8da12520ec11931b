"""moto's standalone S3 server as a child process on 127.0.0.1, on a port the OS picks (the archive tests' upload
target: a real S3 API with versioning and object lock, no cloud account). Run as a script it serves until killed
and prints its port on the first line of stdout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KEYS = {"AWS_ACCESS_KEY_ID": "agentd-test", "AWS_SECRET_ACCESS_KEY": "agentd-test-secret"}


@dataclass
class S3Server:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self) -> Any:
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"],
        )

    def bucket(self, name: str) -> str:
        """A new bucket with object lock (which turns versioning on)."""
        self.client().create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
        return name

    def pause(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        self.resume()
        self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_s3() -> S3Server:
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "serve"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # the server prints its port once it listens
    if not line.strip().isdigit():
        process.kill()
        raise RuntimeError(f"moto's S3 server did not start: {line!r}")
    return S3Server(process, int(line))


def credentials_file(path: Path) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in KEYS.items()))
    path.chmod(0o600)
    return path


def _serve() -> None:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    print(server._server.server_port, flush=True)
    threading.Event().wait()


if __name__ == "__main__" and sys.argv[1:] == ["serve"]:
    _serve()
