#!/usr/bin/env bash
# Install the real harness CLIs that agentd's adapter tests drive, at pinned versions, into a
# git-ignored cache:
#
#   Claude Code  npm  @anthropic-ai/claude-code  -> CACHE/npm/node_modules/.bin/claude
#   Codex        npm  @openai/codex              -> CACHE/npm/node_modules/.bin/codex
#   Hermes       PyPI hermes-agent               -> CACHE/hermes-venv/bin/hermes
#
# CACHE is $AGENTD_HARNESS_CACHE, default <repo>/.cache/harness. Idempotent: a CLI already at
# its pinned version is not reinstalled. Needs node/npm and a python3 in [3.11, 3.14) (override
# with AGENTD_HARNESS_PYTHON=/path/to/python). Only the package registries are contacted; the
# CLIs are never run against the network (version checks use a scratch HOME and, for hermes,
# the venv's package metadata, because `hermes --version` does a network update check).
# Ends with one line per CLI: name, version, absolute path.
set -euo pipefail

CLAUDE_VERSION=2.1.197
CODEX_VERSION=0.169.0
HERMES_VERSION=0.19.0

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${AGENTD_HARNESS_CACHE:-$REPO/.cache/harness}
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
NPM_PREFIX=$CACHE/npm
VENV=$CACHE/hermes-venv
CLAUDE_BIN=$NPM_PREFIX/node_modules/.bin/claude
CODEX_BIN=$NPM_PREFIX/node_modules/.bin/codex
HERMES_BIN=$VENV/bin/hermes

started=$SECONDS
log() { printf 'install.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

command -v npm >/dev/null || die "npm not found on PATH"
command -v node >/dev/null || die "node not found on PATH"

# One installer at a time per cache (parallel test jobs may call this).
if command -v flock >/dev/null; then
    exec 9>"$CACHE/.install.lock"
    flock 9
fi

# Version checks run the CLIs with a throwaway HOME so nothing lands in the real one.
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/agentd-harness-install.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/home" "$SCRATCH/codex" "$SCRATCH/hermes"

run_quiet() {  # run a CLI with a scratch HOME, no telemetry/updates, stdin closed
    env HOME="$SCRATCH/home" CODEX_HOME="$SCRATCH/codex" HERMES_HOME="$SCRATCH/hermes" \
        DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
        timeout 60 "$@" </dev/null 2>/dev/null
}

claude_version() {  # "2.1.197 (Claude Code)" -> 2.1.197; empty if missing or broken
    [[ -x $CLAUDE_BIN ]] || return 0
    run_quiet "$CLAUDE_BIN" --version | awk 'NR == 1 {print $1}' || true
}

codex_version() {  # "codex-cli 0.169.0" -> 0.169.0
    [[ -x $CODEX_BIN ]] || return 0
    run_quiet "$CODEX_BIN" --version | awk 'NR == 1 {print $NF}' || true
}

hermes_version() {  # from the venv's package metadata: no network update check
    [[ -x $VENV/bin/python && -x $HERMES_BIN ]] || return 0
    "$VENV/bin/python" -I -c 'import importlib.metadata as m; print(m.version("hermes-agent"))' 2>/dev/null || true
}

pick_python() {  # the first interpreter that actually runs and is >=3.11,<3.14
    local candidate
    for candidate in ${AGENTD_HARNESS_PYTHON:-} python3.11 python3.12 python3.13 python3; do
        command -v "$candidate" >/dev/null 2>&1 || [[ -x $candidate ]] || continue
        if "$candidate" -c 'import sys, venv; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 14)))' \
            >/dev/null 2>&1; then
            "$candidate" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    return 1
}

# ---- npm: claude + codex ------------------------------------------------------------------

if [[ $(claude_version) == "$CLAUDE_VERSION" && $(codex_version) == "$CODEX_VERSION" ]]; then
    log "claude $CLAUDE_VERSION and codex $CODEX_VERSION already installed"
else
    log "npm install @anthropic-ai/claude-code@$CLAUDE_VERSION @openai/codex@$CODEX_VERSION into $NPM_PREFIX"
    mkdir -p "$NPM_PREFIX"
    # Optional dependencies must stay: the claude native binary and the codex musl binary come from them.
    npm install --prefix "$NPM_PREFIX" --no-fund --no-audit --no-update-notifier --save-exact \
        --include=optional "@anthropic-ai/claude-code@$CLAUDE_VERSION" "@openai/codex@$CODEX_VERSION" >&2
    got=$(claude_version)
    [[ $got == "$CLAUDE_VERSION" ]] || die "claude --version gave '${got}', wanted $CLAUDE_VERSION (native binary missing?)"
    got=$(codex_version)
    [[ $got == "$CODEX_VERSION" ]] || die "codex --version gave '${got}', wanted $CODEX_VERSION"
fi

# ---- PyPI: hermes -------------------------------------------------------------------------

if [[ $(hermes_version) == "$HERMES_VERSION" ]]; then
    log "hermes-agent $HERMES_VERSION already installed"
else
    if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c \
        'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] < (3, 14)))' 2>/dev/null; then
        python=$(pick_python) || die "no python3 between 3.11 and 3.13 found (set AGENTD_HARNESS_PYTHON)"
        log "creating $VENV with $python"
        rm -rf "$VENV"
        "$python" -m venv "$VENV"
    fi
    log "pip install hermes-agent==$HERMES_VERSION into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "hermes-agent==$HERMES_VERSION" >&2
    got=$(hermes_version)
    [[ $got == "$HERMES_VERSION" ]] || die "hermes-agent metadata says '${got}', wanted $HERMES_VERSION"
fi

log "done in $((SECONDS - started)) s; cache $CACHE ($(du -sh "$CACHE" 2>/dev/null | cut -f1))"
printf '%s\t%s\t%s\n' \
    claude "$(claude_version)" "$CLAUDE_BIN" \
    codex "$(codex_version)" "$CODEX_BIN" \
    hermes "$(hermes_version)" "$HERMES_BIN"
