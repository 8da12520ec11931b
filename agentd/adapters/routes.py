"""Where each harness's model calls go, and how its key goes with them: what the model gateway forwards to and
what the attempt is given instead (docs/gateway.md, "What the attempt holds").

The adapter's configuration keeps naming the upstream (claude's `ANTHROPIC_BASE_URL`, codex's provider
`base_url`, hermes' `base_url`) and the key (a variable of its `env_file`). Under the gateway the attempt sees
only the gateway's address, with the same path (only the origin changes: `https://api.openai.com/v1` becomes
`http://127.0.0.1:PORT/v1`), and a per-attempt token where the key was. The key stays in the dispatcher.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from agentd.config import Config
from agentd.config.gateway import Upstream, upstream_of
from agentd.hashing import sha256_hex
from agentd.records import AdapterConfig, CredentialGroup


def key_digest(base_url: str, key: str) -> str:
    """The name agents of one fleet give a provider credential: a digest of the provider's origin and its key (never
    the key), so two agents with the same key share its limits whatever their files are called."""
    return sha256_hex(f"agentd provider credential\n{origin_of(base_url)}\n{key}".encode())[:40]


def through(base_url: str, origin: str) -> str:
    """`base_url` with `origin`'s scheme, host and port: the same path, reached at the gateway."""
    base, gateway = urlsplit(base_url), urlsplit(origin)
    return urlunsplit((gateway.scheme, gateway.netloc, base.path, base.query, ""))


def origin_of(base_url: str) -> str:
    """`https://api.openai.com/v1` → `https://api.openai.com`: what the gateway forwards a request's path to."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def attempt_environment(env: Mapping[str, str], upstream: Upstream, origin: str, token: str) -> dict[str, str]:
    """The attempt's environment under the gateway: the key's variable holds the token (the key itself is
    nowhere in it), and the base URL variable the harness reads points at the gateway."""
    given = dict(env)
    for held in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN") if upstream.key_style != "bearer" else ():
        given.pop(held, None)
    if upstream.key_var is not None:
        given[upstream.key_var] = token
    if upstream.base_var is not None:
        given[upstream.base_var] = through(upstream.base_url, origin)
    return given


def credential_of(adapter: AdapterConfig) -> str | None:
    """A fingerprint of the credential `adapter`'s model calls use: its upstream's origin, its env_file and the
    key's variable (never the key: two adapters reading one file share a credential, as a provider counts
    them). None for a kind whose calls agentd does not route."""
    upstream = upstream_of(adapter, {})
    if upstream is None:
        return None
    said = f"{origin_of(upstream.base_url)}\n{getattr(adapter, 'env_file', None) or ''}\n{upstream.key_var or ''}"
    return sha256_hex(said.encode())[:32]


def credential_group(config: Config, adapter_id: str) -> CredentialGroup | None:
    """Every adapter sharing `adapter_id`'s credential, and the task types and profiles that run on them by
    default: what a provider's reset of that credential holds back (docs/gateway.md, "Quotas and resets")."""
    adapter = config.adapters.get(adapter_id)
    credential = credential_of(adapter) if adapter is not None else None
    if credential is None:
        return None
    adapters = frozenset(a for a, other in config.adapters.items() if credential_of(other) == credential)
    return CredentialGroup(
        credential,
        tuple(sorted(adapters)),
        tuple(sorted(t for t, spec in config.task_types.items() if spec.default_adapter_id in adapters)),
        tuple(sorted(t for t, spec in config.task_types.items() if spec.default_adapter_id is None)),
        tuple(sorted(p for p, profile in config.profiles.items() if profile.default_adapter_id in adapters)),
    )
