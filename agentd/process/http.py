"""Every HTTP client agentd makes (webhooks, ollama, probes): one TLS context per process, and httpx
imported only by the process that sends (docs/decisions.md, "Start-up": ~35 ms a service that never
sends would pay at every start).

Building a context loads the CA bundle from disk (~18 ms of CPU each time); a client per message or per
attempt would pay it every time. One context, made on first use, verifies exactly as a new one would.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl

    import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's own default verifying context, made once."""
    import httpx

    return httpx.create_ssl_context()


def client(timeout: Any) -> httpx.AsyncClient:
    """A client that verifies with the one context and reads no proxy or certificate settings from the
    environment (an adapter's env is only what its config says)."""
    import httpx

    return httpx.AsyncClient(trust_env=False, timeout=timeout, verify=tls_context())
