// The console's one script (docs/web.md, "A console that lives"). It follows the event stream and, as
// events come, reads the page again and puts its live regions ([data-live]) and fragments
// ([data-live-src]) in place: the server renders them (escaped by its templates), the script never builds
// HTML from what an event says. Every "N ago" ticks from one clock: the page's own (body[data-now]).
(function () {
  "use strict";
  const body = document.body;
  const SETTLE_MS = 150; // events that come together are one read of the page
  const GAP_MS = 1000; // and a page is read at most once a second, however busy the stream
  let offsetMs = clockOffset(body.dataset.now);
  let timer = null;
  let lastRead = 0;
  let reading = false;
  let again = false;
  let tasksSeen = new Set(); // the tasks whose events came since the last read (for the fragments)

  setInterval(tick, 1000);
  tick();
  if (!document.querySelector("header nav")) {
    return; // the login page: no session yet
  }
  fetchState().then(function (state) {
    if (!state || !window.EventSource) {
      return;
    }
    const fragments = document.querySelectorAll("[data-live-src]");
    fragments.forEach(function (fragment) {
      readFragment(fragment);
    });
    if (!document.querySelector("[data-live]") && fragments.length === 0) {
      return; // nothing on this page changes with events: the badge as it was at load
    }
    const after = body.dataset.after || String(state.last_sequence);
    const source = new EventSource("/api/events/stream?" + new URLSearchParams({ after: after }).toString());
    source.onmessage = function (message) {
      const event = JSON.parse(message.data);
      if (event.task_id !== null && event.task_id !== undefined) {
        tasksSeen.add(String(event.task_id));
      }
      schedule();
    };
  });
  document.addEventListener("focusout", function () {
    if (again) {
      schedule(); // a region skipped while its field was in use
    }
  });

  function schedule() {
    if (timer === null) {
      timer = setTimeout(read, Math.max(SETTLE_MS, lastRead + GAP_MS - Date.now()));
    }
  }

  function read() {
    timer = null;
    if (reading) {
      again = true;
      return;
    }
    reading = true;
    again = false;
    lastRead = Date.now();
    const tasks = tasksSeen;
    tasksSeen = new Set();
    const work = [fetchState()];
    if (document.querySelector("[data-live]")) {
      work.push(readRegions());
    }
    document.querySelectorAll("[data-live-src]").forEach(function (fragment) {
      if (!fragment.dataset.taskId || tasks.has(fragment.dataset.taskId)) {
        work.push(readFragment(fragment));
      }
    });
    Promise.all(work).finally(function () {
      reading = false;
      if (again) {
        schedule();
      }
    });
  }

  function fetchState() {
    return fetch("/live/state", { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (answer) {
        return answer.ok && !answer.redirected ? answer.json() : null;
      })
      .then(function (state) {
        if (state) {
          const badge = document.getElementById("waiting-badge");
          if (badge) {
            badge.textContent = String(state.waiting);
            badge.hidden = state.waiting === 0;
          }
        }
        return state;
      })
      .catch(function () {
        return null;
      });
  }

  function readRegions() {
    return fetchPage(window.location.href).then(function (page) {
      if (!page) {
        return;
      }
      offsetMs = clockOffset(page.body.dataset.now);
      document.querySelectorAll("[data-live]").forEach(function (region) {
        const fresh = page.getElementById(region.id);
        if (!fresh) {
          return;
        }
        if (inUse(region)) {
          again = true; // not under the operator's hands: read again once they leave the field
          return;
        }
        const kept = keptInput(region);
        const adopted = document.importNode(fresh, true);
        region.replaceWith(adopted);
        restoreInput(adopted, kept);
      });
      tick();
    });
  }

  function readFragment(fragment) {
    return fetchPage(fragment.dataset.liveSrc).then(function (page) {
      if (page) {
        fragment.replaceChildren.apply(fragment, Array.from(page.body.childNodes).map(function (node) {
          return document.importNode(node, true);
        }));
        tick();
      }
    });
  }

  function fetchPage(url) {
    return fetch(url, { credentials: "same-origin" })
      .then(function (answer) {
        return answer.ok && !answer.redirected ? answer.text() : null; // a redirect: the session ended
      })
      .then(function (html) {
        return html === null ? null : new DOMParser().parseFromString(html, "text/html");
      })
      .catch(function () {
        return null;
      });
  }

  function inUse(region) {
    const active = document.activeElement;
    if (!active || !region.contains(active)) {
      return false;
    }
    const typing = active.tagName === "INPUT" && !/^(checkbox|radio|submit|button|hidden)$/.test(active.type);
    return typing || active.tagName === "TEXTAREA" || active.tagName === "SELECT";
  }

  // What the operator put in a region's fields (a ticked box, a note typed and not sent yet), by the form
  // and the field, so the region read again keeps it.
  function fieldKey(field) {
    const form = field.form ? field.form.getAttribute("action") : "";
    return form + " " + field.name + (field.type === "checkbox" ? "=" + field.value : "");
  }

  function keptInput(region) {
    const kept = new Map();
    region.querySelectorAll("input, textarea").forEach(function (field) {
      if (field.type === "checkbox") {
        kept.set(fieldKey(field), field.checked);
      } else if (field.type !== "hidden" && field.value !== field.defaultValue) {
        kept.set(fieldKey(field), field.value);
      }
    });
    return kept;
  }

  function restoreInput(region, kept) {
    region.querySelectorAll("input, textarea").forEach(function (field) {
      const key = fieldKey(field);
      if (!kept.has(key)) {
        return;
      }
      if (field.type === "checkbox") {
        field.checked = kept.get(key);
      } else {
        field.value = kept.get(key);
      }
    });
  }

  // --- one clock -----------------------------------------------------------------------------------

  function clockOffset(now) {
    const page = now ? Date.parse(now) : NaN;
    return isNaN(page) ? 0 : page - Date.now();
  }

  function tick() {
    const now = Date.now() + offsetMs;
    document.querySelectorAll("time[datetime]").forEach(function (time) {
      const moment = Date.parse(time.getAttribute("datetime"));
      if (!isNaN(moment)) {
        const words = relative((now - moment) / 1000);
        if (time.textContent !== words) {
          time.textContent = words;
        }
      }
    });
  }

  // As agentd/clock.py `relative` (which agentd/web/times.py uses) and `age` say it.
  function relative(seconds) {
    if (Math.abs(seconds) < 1) {
      return "just now";
    }
    return seconds > 0 ? age(seconds) + " ago" : "in " + age(-seconds);
  }

  function age(seconds) {
    const s = Math.floor(Math.max(seconds, 0));
    const two = function (n) {
      return String(n).padStart(2, "0");
    };
    if (s < 60) {
      return s + "s";
    }
    if (s < 3600) {
      return Math.floor(s / 60) + "m" + two(s % 60) + "s";
    }
    if (s < 86400) {
      return Math.floor(s / 3600) + "h" + two(Math.floor((s % 3600) / 60)) + "m";
    }
    return Math.floor(s / 86400) + "d" + two(Math.floor((s % 86400) / 3600)) + "h";
  }
})();
