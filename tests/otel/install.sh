#!/usr/bin/env bash
# Install the OTLP backend the telemetry test sends spans to (tests/test_telemetry.py), at a pinned version,
# into a git-ignored cache:
#
#   Arize Phoenix  PyPI arize-phoenix  -> <repo>/.cache/phoenix-venv/bin/phoenix
#
# Why Phoenix (docs/decisions.md, "Telemetry"): neither the OpenTelemetry Collector nor Jaeger is packaged by
# Debian or PyPI (nor npm); Phoenix is an open-source, OpenTelemetry-native trace backend that PyPI has. It
# receives OTLP/HTTP at /v1/traces, as a collector does, and reads back what it stored through its REST API.
# ~850 MB, ~1.5 min from the registry. Idempotent: an install at the pinned version is kept.
set -euo pipefail

PHOENIX_VERSION=20.26.1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${AGENTD_PHOENIX_VENV:-$REPO/.cache/phoenix-venv}
PYTHON=${AGENTD_PHOENIX_PYTHON:-python3}

if [ -f "$VENV/installed" ] && [ "$(cat "$VENV/installed")" = "$PHOENIX_VERSION" ]; then
  echo "phoenix $PHOENIX_VERSION $VENV/bin/phoenix"
  exit 0
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "arize-phoenix==$PHOENIX_VERSION" >&2
"$VENV/bin/phoenix" --help >/dev/null
echo "$PHOENIX_VERSION" >"$VENV/installed"
echo "phoenix $PHOENIX_VERSION $VENV/bin/phoenix"
