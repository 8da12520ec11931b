// The console's one script (docs/web.md, "The running attempt"): the overview's live activity over the
// event stream. Text only (textContent, never HTML): what a harness reports is shown, never run.
(function () {
  "use strict";
  const live = document.getElementById("live");
  if (!live || !window.EventSource) {
    return;
  }
  const RELOAD_ON = ["task_claimed", "task_finished", "dispatch_paused", "dispatch_resumed"];
  const params = new URLSearchParams({ after: live.dataset.after });
  live.dataset.types.split(",").concat(RELOAD_ON).forEach(function (type) {
    params.append("type", type);
  });
  const source = new EventSource("/api/events/stream?" + params.toString());
  source.onmessage = function (message) {
    const event = JSON.parse(message.data);
    if (RELOAD_ON.indexOf(event.type) >= 0) {
      source.close();
      window.location.reload();  // an attempt started or ended: the page shows it as it is now
      return;
    }
    const list = document.getElementById("activity-" + event.attempt_id);
    if (!list) {
      return;
    }
    if (event.type === "todos_updated") {
      showTodos(document.getElementById("todos-" + event.attempt_id), event.payload.todos || []);
    }
    list.appendChild(item(event));
  };

  function item(event) {
    const li = document.createElement("li");
    li.className = "event " + event.type;
    li.dataset.sequence = event.sequence;
    const type = document.createElement("span");
    type.className = "type";
    type.textContent = event.type;
    li.appendChild(type);
    li.appendChild(document.createTextNode(" " + describe(event.type, event.payload || {})));
    return li;
  }

  function describe(type, p) {
    switch (type) {
      case "tool_started":
        return p.tool + " " + (p.summary || "");
      case "tool_finished":
        return p.tool + " " + (p.summary || "") + (p.ok ? " (ok)" : " (failed)");
      case "model_turn_completed":
        return "turn " + p.turn + ": " + p.input_tokens + " in, " + p.output_tokens + " out";
      case "attempt_progress":
        return p.text || "";
      case "activity_capped":
        return p.dropped + " dropped over the cap";
      case "todos_updated":
        return (p.todos || []).length + " todos";
      default:
        return "";
    }
  }

  function showTodos(list, todos) {
    if (!list) {
      return;
    }
    list.replaceChildren();
    todos.forEach(function (todo) {
      const li = document.createElement("li");
      li.className = "todo " + todo.status;
      li.textContent = todo.text + " ";
      const status = document.createElement("em");
      status.textContent = todo.status;
      li.appendChild(status);
      list.appendChild(li);
    });
  }
})();
