#!/bin/sh
printf '{"status":"retryable_failure","machine_status":"needs_retry","operator_summary":"could not reach the thing (attempt %s)"}' \
  "$AGENTD_ATTEMPT_ID" > "$AGENTD_RESULT_PATH"
