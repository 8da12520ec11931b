"""The one TLS context of a process, for every HTTP client agentd makes (webhooks, ollama, probes).

Building a context loads the CA bundle from disk (~18 ms of CPU each time); a client per message or per
attempt would pay it every time. One context, made on first use, verifies exactly as a new one would.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's own default verifying context, made once."""
    return httpx.create_ssl_context()
