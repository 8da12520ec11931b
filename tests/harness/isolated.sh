#!/usr/bin/env bash
# Run a command with no network but loopback: a user + network namespace with `lo` up.
# Where the machine does not allow namespaces, run it as-is and say so: the harness CLIs are
# still configured to talk only to 127.0.0.1 (telemetry, updates and plugin sync off).
set -euo pipefail
if unshare --user --map-root-user --net -- sh -c 'ip link set lo up' >/dev/null 2>&1; then
  export AGENTD_NET_ISOLATED=1
  exec unshare --user --map-root-user --net -- sh -c 'ip link set lo up && exec "$@"' sh "$@"
fi
echo "isolated.sh: network namespaces are not available here; running on plain loopback" >&2
exec "$@"
