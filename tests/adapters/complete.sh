#!/bin/sh
# Leaves a report in the workspace and claims it: a task that really completes.
mkdir -p reports
echo "task $AGENTD_TASK_ID attempt $AGENTD_ATTEMPT_ID" > "reports/$AGENTD_TASK_ID.md"
printf '{"status":"completed","machine_status":"ok","operator_summary":"done","artifact_paths":["reports/%s.md"]}' \
  "$AGENTD_TASK_ID" > "$AGENTD_RESULT_PATH"
