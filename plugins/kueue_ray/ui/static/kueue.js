// The two Kueue pages (queues, task-instance tab): poll the JSON API and render what changed. No
// framework, no build step. Text is always set with textContent, never parsed as HTML.
"use strict";

(function () {
  const page = document.body.dataset.page;
  const content = document.getElementById("content");
  const banner = document.getElementById("banner");
  const freshness = document.getElementById("freshness");
  let clockOffset = 0; // server time - browser time, in ms
  let lastData = null;
  let scrolled = false;

  // ----- small helpers ---------------------------------------------------------------------------

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("data-")) node.setAttribute(key, value);
      else if (key === "style") node.setAttribute("style", value);
      else node.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function now() { return Date.now() + clockOffset; }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    seconds = Math.max(0, Math.round(seconds));
    const h = Math.floor(seconds / 3600), m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
    if (h) return `${h}h ${m}m`;
    if (m) return `${m}m ${s}s`;
    return `${s}s`;
  }

  function since(iso) { return iso ? (now() - Date.parse(iso)) / 1000 : null; }

  // The time zone chosen in Airflow's UI (its selector keeps it in this origin's localStorage under
  // "timezone", JSON-encoded), else the browser's, as Airflow itself defaults.
  const AIRFLOW_TIMEZONE_KEY = "timezone";

  function selectedTimezone() {
    try {
      const chosen = JSON.parse(localStorage.getItem(AIRFLOW_TIMEZONE_KEY) || "null");
      if (chosen) {
        new Intl.DateTimeFormat("en", { timeZone: chosen }); // throws on a zone this browser does not know
        return chosen;
      }
    } catch (error) { /* unreadable or unknown: the browser's own zone */ }
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
  }

  // Airflow's format, 24-hour: "2026-12-04 15:02:07" in the selected zone; the date left out for today.
  function clock(iso) {
    if (!iso) return "–";
    const zone = selectedTimezone();
    const format = (date) => {
      const parts = Object.fromEntries(new Intl.DateTimeFormat("en-GB", {
        timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit",
        hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
      }).formatToParts(date).map((p) => [p.type, p.value]));
      return [`${parts.year}-${parts.month}-${parts.day}`, `${parts.hour}:${parts.minute}:${parts.second}`];
    };
    const [day, time] = format(new Date(iso));
    return day === format(new Date(now()))[0] ? time : `${day} ${time}`;
  }

  // Airflow's selector changed the zone (in the page around this one): draw the times again.
  window.addEventListener("storage", (event) => {
    if (event.key === AIRFLOW_TIMEZONE_KEY && lastData) render(lastData);
  });

  // An element whose text is "N ago" / a running duration, refreshed every second.
  function age(iso, suffix) {
    return el("span", { class: "age", "data-since": iso, "data-suffix": suffix || "", text: duration(since(iso)) + (suffix || "") });
  }

  function tick() {
    for (const node of document.querySelectorAll(".age")) {
      node.textContent = duration(since(node.dataset.since)) + node.dataset.suffix;
    }
    if (lastData) renderFreshness(lastData);
  }

  function link(href, text) { return href ? el("a", { href, target: "_top", text }) : text; }

  function owner(o) {
    if (o.foreign_deployment) return el("span", { class: "foreign-owner", "data-deployment": o.foreign_deployment, text: o.description });
    if (o.not_airflow) return el("span", { class: "not-airflow", title: o.detail, text: o.description });
    return el("span", {},
      link(o.task_instance_url, `${o.dag_id} / ${o.run_id} / ${o.task_id}${o.map_index >= 0 ? ` [${o.map_index}]` : ""}`),
      " ", el("a", { href: o.kueue_tab_url, target: "_top", class: "muted", text: "(Kueue tab)" }),
      o.object ? el("div", { class: "muted owner-object", "data-kind": o.object.kind, "data-role": o.object.role || null }, objectWords(o.object)) : null);
  }

  // "RayCluster aurora-x (active) of RayService aurora", "RayJob name".
  function objectWords(obj) {
    const role = obj.role ? ` (${obj.role === "active" ? "serving" : "being brought up"})` : "";
    return `${obj.kind} ${obj.name}${role}${obj.rayservice ? ` of RayService ${obj.rayservice}` : ""}`;
  }

  const RESOURCE_WORDS = { cpu: "CPU", memory: "memory" };

  // [{resource, amount}] in the quota's units: "36 CPU · 272Gi memory · 4 nvidia.com/gpu".
  function requests(list) {
    if (!list || !list.length) return "–";
    return list.map((r) => `${r.amount} ${RESOURCE_WORDS[r.resource] || r.resource}`).join(" · ");
  }

  function priority(p) {
    if (!p) return "–";
    const parts = [p.class, p.value !== null && p.value !== undefined ? `(${p.value})` : null].filter(Boolean);
    return parts.join(" ") || "–";
  }

  // ----- cluster health --------------------------------------------------------------------------

  function renderFreshness(data) {
    const cluster = data.cluster || {};
    if (cluster.reachable) {
      banner.hidden = true;
      // "live" while there is something to follow: always on the queues page, on a tab while its task waits.
      const settled = page === "task" && (!(data.rayjob || data.rayservice) || (data.phase && data.phase.terminal));
      freshness.textContent = settled ? "" : "live";
      freshness.title = settled ? "" : `times in ${selectedTimezone()}`;
      return;
    }
    banner.hidden = false;
    banner.id = "banner";
    if (!cluster.failing_since) {
      banner.textContent = "Connecting to the Kubernetes API…";
      freshness.textContent = "";
      return;
    }
    const stale = cluster.synced_at ? ` Showing the last known state, as of ${clock(cluster.synced_at)} (${duration(since(cluster.synced_at))} ago).` : " Nothing is known yet.";
    banner.textContent = `The Kubernetes API cannot be reached since ${clock(cluster.failing_since)} (${cluster.error || "no answer"}).${stale}`;
    banner.dataset.state = "unreachable";
    freshness.textContent = cluster.synced_at ? `state from ${duration(since(cluster.synced_at))} ago` : "";
  }

  // ----- queues page -----------------------------------------------------------------------------

  function quotaTable(rows) {
    return el("table", { class: "quota" },
      el("tr", {}, ["flavor", "resource", "usage", "", "nominal", "borrowing limit", "lending limit", "reserved"].map((h) => el("th", { text: h }))),
      rows.map((r) => el("tr", { "data-flavor": r.flavor, "data-resource": r.resource },
        el("td", { text: r.flavor }),
        el("td", { text: r.resource }),
        el("td", { class: "num", text: `${r.usage} / ${r.nominal}${r.borrowed && r.borrowed !== "0" ? ` (${r.borrowed} borrowed)` : ""}` }),
        el("td", {}, el("div", { class: "bar", title: `admitted ${r.usage}, reserved ${r.reserved}, nominal ${r.nominal}` },
          el("div", { class: "fill reserved", style: `width:${r.bar.reserved_pct}%` }),
          el("div", { class: "fill usage", style: `width:${r.bar.usage_pct}%` }),
          el("div", { class: "mark", style: `left:${r.bar.nominal_pct}%`, title: "nominal quota" }),
          r.bar.lendable_from_pct === null ? null : el("div", { class: "mark lend", style: `left:${r.bar.lendable_from_pct}%`, title: "lendable beyond this" }))),
        el("td", { class: "num", text: r.nominal }),
        el("td", { class: "num", text: r.borrowing_limit ?? "–" }),
        el("td", { class: "num", text: r.lending_limit ?? "–" }),
        el("td", { class: "num", text: r.reserved }))));
  }

  function pendingSection(cq) {
    const p = cq.pending;
    const section = el("section", { class: "pending", "data-cq": cq.name });
    section.append(el("h3", { text: `Pending (${p.total ?? cq.counts.pending ?? 0}) in Kueue's order` }));
    if (!p.available) {
      section.append(el("p", { class: "muted", text: `Positions unavailable: ${p.error}` }));
      return section;
    }
    if (p.error) section.append(el("p", { class: "muted", text: `Positions as of ${clock(p.fetched_at)}; the latest read failed: ${p.error}` }));
    if (p.items.length) {
      section.append(el("table", {},
        el("tr", {}, ["#", "in LocalQueue", "owner", "requests", "priority", "LocalQueue", "workload", "waiting"].map((h) => el("th", { text: h }))),
        p.items.map((item) => el("tr", { class: "pending-row", "data-position": item.position, "data-workload": item.workload, "data-run-id": item.owner.run_id, "data-task-id": item.owner.task_id },
          el("td", { class: "num", text: item.position }),
          el("td", { class: "num", text: item.position_in_local_queue }),
          el("td", {}, owner(item.owner)),
          el("td", { class: "requests", text: requests(item.requests) }),
          el("td", { text: priority(item.priority) }),
          el("td", { text: `${item.namespace}/${item.local_queue}` }),
          el("td", { class: "muted", text: item.workload }),
          el("td", {}, item.created ? age(item.created) : "–")))));
    } else if (!p.hidden) {
      section.append(el("p", { class: "muted", text: "Nothing pending." }));
    }
    if (p.hidden) section.append(el("p", { class: "hidden-count", "data-hidden": p.hidden, text: `${p.hidden} pending workload(s) of DAGs you cannot read, requesting ${requests(p.hidden_requests)}.` }));
    return section;
  }

  function admittedSection(cq) {
    const a = cq.admitted;
    const section = el("section", { class: "admitted", "data-cq": cq.name });
    section.append(el("h3", { text: `Admitted (${cq.counts.admitted ?? a.items.length + a.hidden})` }));
    if (a.items.length) {
      // The worker column only where MultiKueue dispatched something: elsewhere every row runs here.
      const dispatched = a.items.some((item) => item.worker_cluster);
      const headings = ["owner", "requests", "priority", "phase", ...(dispatched ? ["worker cluster"] : []), "LocalQueue", "workload", "admitted for"];
      section.append(el("table", {},
        el("tr", {}, headings.map((h) => el("th", { text: h }))),
        a.items.map((item) => el("tr", { class: "admitted-row", "data-workload": item.workload, "data-run-id": item.owner.run_id, "data-task-id": item.owner.task_id },
          el("td", {}, owner(item.owner)),
          el("td", { class: "requests", text: requests(item.requests) }),
          el("td", { text: priority(item.priority) }),
          el("td", { text: item.phase || "–" }),
          dispatched ? el("td", { class: "worker-cluster", text: item.worker_cluster || "–" }) : null,
          el("td", { text: `${item.namespace}/${item.local_queue}` }),
          el("td", { class: "muted", text: item.workload }),
          el("td", {}, item.admitted_at ? age(item.admitted_at) : "–")))));
    } else if (!a.hidden) {
      section.append(el("p", { class: "muted", text: "Nothing admitted." }));
    }
    if (a.hidden) section.append(el("p", { class: "hidden-count", "data-hidden": a.hidden, text: `${a.hidden} admitted workload(s) of DAGs you cannot read, using ${requests(a.hidden_requests)}.` }));
    return section;
  }

  function usageCell(c) {
    if (!c) return el("td", { class: "num muted", text: "–" });
    return el("td", { class: c.borrowed ? "num borrowing" : "num" },
      `${c.usage} / ${c.nominal}`, c.borrowed ? el("div", { class: "muted", text: `${c.borrowed} borrowed` }) : null);
  }

  function cohortCard(c) {
    return el("div", { class: "card cohort", id: `cohort-${c.name}`, "data-cohort": c.name },
      el("h2", {}, `Cohort ${c.name}`, el("span", { class: "badge", text: `${c.cluster_queues.length} ClusterQueue(s)` })),
      el("table", { class: "cohort-usage" },
        el("tr", {}, el("th", { text: "ClusterQueue" }), c.resources.map((r) => el("th", { class: "num", text: `${r.resource} (${r.flavor})` }))),
        c.members.map((m) => el("tr", { class: "cohort-member", "data-cq": m.cluster_queue },
          el("td", {}, el("a", { href: `#cq-${m.cluster_queue}`, text: m.cluster_queue })),
          m.usage.map(usageCell))),
        el("tr", { class: "cohort-total" }, el("td", { text: "cohort" }), c.total.map(usageCell))));
  }

  function policySection(cq) {
    return el("section", { class: "policy", "data-cq": cq.name },
      el("h3", { text: "Who may preempt work here" }),
      el("ul", {}, (cq.preemption_words || []).map((line) => el("li", { class: "policy-line", text: line }))),
      cq.may_preempt ? el("p", { class: "muted may-preempt", text: cq.may_preempt }) : null);
  }

  function renderQueues(data) {
    const cards = data.cluster_queues.map((cq) => el("div", { class: "card cluster-queue", id: `cq-${cq.name}`, "data-cq": cq.name },
      el("h2", {}, cq.name,
        cq.cohort ? el("a", { class: "badge", href: `#cohort-${cq.cohort}`, title: "cohort", text: `cohort ${cq.cohort}` }) : el("span", { class: "badge", text: "no cohort" }),
        el("span", { class: "badge", text: cq.queueing_strategy }),
        cq.active.status === "False" ? el("span", { class: "badge", text: `inactive: ${cq.active.message || cq.active.reason}` }) : null),
      el("div", { class: "muted" },
        `${cq.counts.pending} pending · ${cq.counts.admitted} admitted · LocalQueues: `,
        cq.local_queues.map((q) => `${q.namespace}/${q.name}`).join(", ") || "none"),
      el("h3", { text: "Quota" }),
      quotaTable(cq.quota),
      policySection(cq),
      pendingSection(cq),
      admittedSection(cq)));
    const cohorts = data.cohorts.map(cohortCard);
    content.replaceChildren(
      el("p", { class: "muted" }, `Signed in as ${data.user}. Namespaces watched: ${data.namespaces.join(", ")}.`),
      ...cohorts,
      ...(cards.length ? cards : [el("p", { class: "muted", text: "No ClusterQueues." })]));
    if (!scrolled && location.hash) {
      const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
      if (target) { target.scrollIntoView(); scrolled = true; }
    }
  }

  // ----- task-instance tab -----------------------------------------------------------------------

  function chart(spans) {
    const total = spans.reduce((sum, s) => sum + s.duration_seconds, 0) || 1;
    return el("div", { class: "chart", role: "img", "aria-label": "timeline" },
      spans.filter((s) => s.kind !== "finished").map((s) => el("div", {
        class: `seg k-${s.kind}`, style: `flex-grow:${Math.max(s.duration_seconds / total, 0.004)}`,
        title: `${s.label}: ${duration(s.duration_seconds)} from ${clock(s.start)}`,
      })));
  }

  function spansTable(spans) {
    return el("table", { class: "spans" },
      el("tr", {}, ["", "what", "start", "duration", "Kueue / KubeRay says"].map((h) => el("th", { text: h }))),
      spans.map((s) => el("tr", { class: "span", "data-kind": s.kind },
        el("td", {}, el("i", { class: `swatch k-${s.kind}` })),
        el("td", {}, s.label,
          s.kind === "preempted" && s.preemptor
            ? el("div", { class: "preemptor" }, "by ", s.preemptor.known ? link(s.preemptor.kueue_tab_url, s.preemptor.description) : s.preemptor.description)
            : null),
        el("td", { text: clock(s.start) }),
        el("td", { class: "num" }, s.ongoing ? age(s.start, " so far") : duration(s.duration_seconds)),
        el("td", { class: "message", title: s.message, text: [s.reason, s.message].filter(Boolean).join(": ") }))));
  }

  // Whom this task's RayJob or RayService preempted (as this API server saw it): [] when nobody.
  function victims(data) {
    const list = data.preempted || [];
    if (!list.length) return [];
    return [el("div", { class: "card", id: "preempted" },
      el("h3", { text: `Preempted by this task (${list.length})` }),
      el("ul", {}, list.map((v) => el("li", { class: "victim" },
        v.victim.kueue_tab_url ? link(v.victim.kueue_tab_url, v.victim.description) : v.victim.description,
        el("span", { class: "muted", text: ` at ${clock(v.at)}${v.reason ? ` (${v.reason})` : ""}` })))))];
  }

  // "Why still queued": the verdict first (data-stuck when waiting will not admit it), then the holders.
  function whyQueued(w) {
    if (!w) return null;
    return el("div", { class: "card", id: "why-queued", "data-stuck": String(w.stuck) },
      el("h3", { text: "Why still queued" }),
      el("p", { id: "why-verdict", class: w.stuck ? "banner" : "", text: w.verdict }),
      el("p", { text: w.sentences[1] }),
      w.holders.length
        ? el("table", { class: "holders" },
          el("tr", {}, ["holding its quota", "ClusterQueue", "priority", "uses", "lasts", "may it take the quota?"].map((h) => el("th", { text: h }))),
          w.holders.map((h) => el("tr", { class: "holder", "data-workload": h.workload, "data-may-take": String(h.may_take) },
            el("td", {}, h.workload, h.owner ? el("div", { class: "muted", text: h.owner }) : null,
              h.owner_kind ? el("div", { class: "muted", text: `${h.owner_kind} ${h.owner_name}` }) : null),
            el("td", { text: h.cluster_queue }),
            el("td", { text: priority(h.priority) }),
            el("td", { text: Object.entries(h.uses).map(([r, a]) => `${a} ${r}`).join(", ") }),
            el("td", { text: h.lasting ? "until deleted" : "ends by itself" }),
            el("td", { text: `${h.may_take ? "yes" : "no"}: ${h.how}` }))))
        : el("p", { class: "muted", text: "Nothing admitted holds its quota." }),
      el("p", { id: "why-borrowing", text: `Borrowing: ${w.borrowing}` }));
  }

  // While the Ray cluster starts: its pods with the scheduler's or kubelet's reason.
  function podsCard(pods) {
    if (!pods) return null;
    return el("div", { class: "card", id: "pods" },
      el("h3", { text: "Ray cluster pods" }),
      pods.length
        ? el("table", { class: "pods" },
          el("tr", {}, ["pod", "role", "phase", "reason"].map((h) => el("th", { text: h }))),
          pods.map((p) => el("tr", { class: "pod", "data-pod": p.name, "data-reason": p.reason || "" },
            el("td", { text: p.name }),
            el("td", { text: p.role }),
            el("td", { text: p.phase }),
            el("td", { class: "message", text: p.reason ? `${p.reason}${p.message ? `: ${p.message}` : ""}` : "–" }))))
        : el("p", { class: "muted", text: "KubeRay has not created the pods yet." }));
  }

  // For a user who may edit the DAG: change the RayJob's priority (the classes the task's policy allows).
  let priorityResult = "";
  function priorityControl(offer) {
    if (!offer) return null;
    const select = el("select", { id: "priority-select" },
      offer.choices.map((c) => el("option", { value: c, text: c, selected: c === offer.current ? "selected" : null })));
    const button = el("button", { id: "priority-change", type: "button", text: "Change priority" });
    const result = el("span", { id: "priority-result", class: "muted", text: priorityResult });
    button.addEventListener("click", async () => {
      const url = new URL("api/v1/task-instance/priority", location.href);
      for (const [key, value] of new URLSearchParams(location.search)) url.searchParams.set(key, value);
      url.searchParams.set("priority", select.value);
      button.disabled = true;
      const response = await fetch(url, { method: "POST", credentials: "same-origin", headers: { Accept: "application/json" } });
      const body = await response.json().catch(() => ({}));
      priorityResult = body.message || body.detail || `answered ${response.status}`;
      result.textContent = priorityResult;
      result.dataset.status = String(response.status);
      button.disabled = false;
    });
    return el("div", { class: "card", id: "priority-change-card" },
      el("h3", { text: "Change priority" }), select, " ", button, " ", result);
  }

  function renderService(data) {
    const s = data.rayservice;
    const pos = data.position;
    const apps = Object.entries(s.applications || {}).map(([name, state]) => `${name} ${state}`).join(", ");
    const facts = el("dl", { class: "facts" },
      el("dt", { text: "RayService" }), el("dd", { id: "rayservice", text: `${s.namespace}/${s.name}${s.exists ? "" : " (deleted)"}` }),
      el("dt", { text: "Workload" }), el("dd", { id: "workload", text: s.workload ? `${s.workload} (${s.admitted_by === "cluster" ? "its RayCluster's" : "the RayService's"})` : "not created yet" }),
      el("dt", { text: "LocalQueue" }), el("dd", { id: "local-queue", text: s.local_queue || "–" }),
      el("dt", { text: "ClusterQueue" }), el("dd", { id: "cluster-queue" }, s.cluster_queue ? link(s.cluster_queue_url, s.cluster_queue) : "–"),
      el("dt", { text: "Priority" }), el("dd", { id: "priority", text: priority(s.priority) }),
      el("dt", { text: "Active cluster" }), el("dd", { id: "active-cluster", text: s.active_cluster || "none" }),
      el("dt", { text: "Pending cluster" }), el("dd", { id: "pending-cluster", text: s.pending_cluster || "none" }),
      el("dt", { text: "Serve applications" }), el("dd", { id: "applications", text: apps || "–" }),
      s.now_deployed_by ? el("dt", { text: "Now deployed by" }) : null,
      s.now_deployed_by ? el("dd", { id: "now-deployed-by" }, s.now_deployed_by.dag_id ? owner(s.now_deployed_by) : s.now_deployed_by.description) : null);
    const phase = el("div", { class: "card" },
      el("div", { class: "phase", id: "phase", "data-phase": data.phase.phase || "" }, data.phase.words),
      data.phase.message ? el("div", { class: "message", id: "phase-message", title: data.phase.message, text: `${data.phase.reason}: ${data.phase.message}` }) : null,
      el("div", { id: "position", "data-position": pos ? pos.in_cluster_queue : "" },
        pos ? `Position ${pos.in_cluster_queue} of ${pos.pending_in_cluster_queue} pending in ClusterQueue ${s.cluster_queue} (${pos.in_local_queue} in its LocalQueue)` : ""),
      facts);
    const t = data.timeline;
    const recorded = el("div", { class: "card" },
      el("h3", { text: "Timeline" }),
      t.spans.length ? chart(t.spans) : el("p", { class: "muted", text: "No timeline yet." }),
      el("div", { class: "legend" }, [...new Set(t.spans.map((x) => x.kind))].map((k) => el("span", {}, el("i", { class: `k-${k}` }), k))),
      t.spans.length ? spansTable(t.spans) : null,
      t.source === "xcom"
        ? el("p", { class: "muted", id: "service-timeline" },
          `Recorded by the task: ${duration(t.queued_seconds || 0)} queued, ${duration(t.starting_seconds || 0)} starting, ${t.preemption_count || 0} preemption(s).`)
        : el("p", { class: "muted", text: t.source === "live" ? "From the Workload, until the task records its own." : "" }));
    const links = el("p", {},
      data.links.queue ? el("a", { href: data.links.queue, target: "_top", id: "queue-link", text: `Queue ${s.cluster_queue} on the Kueue queues page` }) : "");
    content.replaceChildren(phase, recorded, ...victims(data), links);
  }

  function renderTask(data) {
    if (data.rayservice) {
      renderService(data);
      return;
    }
    const r = data.rayjob;
    if (!r) {
      content.replaceChildren(el("p", { class: "muted", id: "no-rayjob", text: data.message }));
      return;
    }
    const pos = data.position;
    const facts = el("dl", { class: "facts" },
      el("dt", { text: "RayJob" }), el("dd", { id: "rayjob", text: `${r.namespace}/${r.name}${r.exists ? "" : " (deleted)"}` }),
      el("dt", { text: "Workload" }), el("dd", { id: "workload", text: r.workload || "not created yet" }),
      el("dt", { text: "LocalQueue" }), el("dd", { id: "local-queue", text: r.local_queue || "–" }),
      el("dt", { text: "ClusterQueue" }), el("dd", { id: "cluster-queue" }, r.cluster_queue ? link(r.cluster_queue_url, r.cluster_queue) : "–"),
      r.worker_cluster ? el("dt", { text: "Worker cluster" }) : null,
      r.worker_cluster ? el("dd", { id: "worker-cluster", title: "the cluster MultiKueue dispatched this RayJob to", text: r.worker_cluster }) : null,
      el("dt", { text: "Priority" }), el("dd", { id: "priority", text: priority(r.priority) }),
      r.priority_changed_by ? el("dt", { text: "Priority changed" }) : null,
      r.priority_changed_by ? el("dd", { id: "priority-changed-by", text: `from Airflow by ${r.priority_changed_by}` }) : null);
    const phase = el("div", { class: "card" },
      el("div", { class: "phase", id: "phase", "data-phase": data.phase.phase || "" }, data.phase.words),
      data.phase.message ? el("div", { class: "message", id: "phase-message", title: data.phase.message, text: `${data.phase.reason}: ${data.phase.message}` }) : null,
      el("div", { id: "position", "data-position": pos ? pos.in_cluster_queue : "" },
        pos ? `Position ${pos.in_cluster_queue} of ${pos.pending_in_cluster_queue} pending in ClusterQueue ${r.cluster_queue} (${pos.in_local_queue} in its LocalQueue)` : ""),
      facts);
    const t = data.timeline;
    const timeline = el("div", { class: "card" },
      el("h3", { text: "Timeline" }),
      t.spans.length ? chart(t.spans) : el("p", { class: "muted", text: "No timeline yet." }),
      el("div", { class: "legend" }, [...new Set(t.spans.map((s) => s.kind))].map((k) => el("span", {}, el("i", { class: `k-${k}` }), k))),
      t.spans.length ? spansTable(t.spans) : null,
      el("p", { class: "muted" },
        t.source === "xcom" ? "Recorded by the task while it waited (XCom 'timeline')." : t.source === "live" ? "Observed live by Airflow's API server." : "",
        t.preemption_count ? ` Preemptions: ${t.preemption_count}.` : ""));
    const links = el("p", {},
      data.links.ray_dashboard ? el("a", { href: data.links.ray_dashboard, target: "_blank", rel: "noopener", id: "ray-dashboard", text: "Ray dashboard" }) : el("span", { class: "muted", text: "No Ray dashboard (no Ray cluster now)" }),
      " · ",
      data.links.queue ? el("a", { href: data.links.queue, target: "_top", id: "queue-link", text: `Queue ${r.cluster_queue} on the Kueue queues page` }) : "");
    content.replaceChildren(...[phase, whyQueued(data.why_queued), podsCard(data.pods), priorityControl(data.priority_change), timeline, ...victims(data), links].filter(Boolean));
  }

  // ----- polling ---------------------------------------------------------------------------------

  function render(data) {
    (page === "queues" ? renderQueues : renderTask)(data);
    renderFreshness(data);
  }

  // A mapped task's index, from the Airflow page this tab is shown in (.../mapped/<index>/plugin/...):
  // the tab's own URL carries none (Airflow leaves {MAP_INDEX} unreplaced on unmapped tasks). -1 if none.
  function mapIndexAround() {
    try {
      const match = window.top.location.pathname.match(/\/mapped\/(\d+)\/plugin\//);
      return match ? match[1] : "-1";
    } catch (error) {
      return "-1"; // not inside Airflow's page (another origin): an unmapped task
    }
  }

  function apiUrl() {
    const base = new URL(page === "queues" ? "api/v1/queues" : "api/v1/task-instance", location.href);
    if (page === "task") {
      for (const [key, value] of new URLSearchParams(location.search)) base.searchParams.set(key, value);
      if (!base.searchParams.has("map_index")) base.searchParams.set("map_index", mapIndexAround());
    }
    return base;
  }

  const POLL_MS = 2000; // ask every 2 s; an unchanged cluster is a 204
  const FULL_MS = 30000; // and take a full answer every 30 s anyway (XComs, permissions)
  const ANSWER_MS = 20000; // a poll not answered by then is dropped and asked again: a stuck request never freezes the page

  function pause(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

  async function poll() {
    let version = null;
    let fullAt = 0;
    for (;;) {
      const url = apiUrl();
      if (version !== null && Date.now() - fullAt < FULL_MS) url.searchParams.set("known", version);
      let response;
      try {
        response = await fetch(url, {
          credentials: "same-origin",
          headers: { Accept: "application/json" },
          signal: AbortSignal.timeout(ANSWER_MS),
        });
      } catch (error) {
        banner.hidden = false;
        banner.textContent = error.name === "TimeoutError"
          ? `Airflow's API server did not answer within ${ANSWER_MS / 1000} s; asking again.`
          : `Airflow's API server cannot be reached (${error}); retrying.`;
        version = null; // the next answer is a full one, which takes this banner down
        await pause(3000);
        continue;
      }
      if (response.status === 204) {
        await pause(POLL_MS);
        continue;
      }
      if (response.status === 401 || response.status === 403) {
        const body = await response.json().catch(() => ({}));
        content.replaceChildren(el("p", { id: "denied", class: "banner", text: body.detail || "Not allowed." }));
        version = null;
        await pause(15000);
        continue;
      }
      if (!response.ok) {
        banner.hidden = false;
        banner.textContent = `The Kueue API answered ${response.status}; retrying.`;
        version = null;
        await pause(3000);
        continue;
      }
      const data = await response.json();
      clockOffset = Date.parse(data.now) - Date.now();
      lastData = data;
      version = data.version;
      fullAt = Date.now();
      render(data);
      document.body.dataset.version = String(version);
      await pause(POLL_MS);
    }
  }

  setInterval(tick, 1000);
  poll();
})();
