// The sandboxes table (live from the event stream) and the create form.

import { api, followEvents } from "./api.js";
import { age, el, guarded, showError, stateBadge, table } from "./ui.js";

const COLUMNS = [
  ["Id", (s) => el("span.mono", {}, s.id)],
  ["Name", (s) => s.name || el("span.muted", {}, "—")],
  ["State", (s) => stateBadge(s.state)],
  ["Template", (s) => s.image || s.template],
  ["Isolation", (s) => s.isolation || "namespace"],
  ["CPU", (s) => s.cpu],
  ["Memory", (s) => `${s.memoryMB} MiB`],
  ["Disk", (s) => (s.diskMB ? `${s.diskMB} MiB` : "—")],
  ["Age", (s) => age(s.createdAt)],
  ["Expires", (s) => (s.expiresAt ? new Date(s.expiresAt).toLocaleTimeString() : "—")],
  ["Metadata", (s) => Object.entries(s.metadata || {}).map(([k, v]) => `${k}=${v}`).join(" ")],
];

function createForm(onCreated) {
  const field = (label, input) => el("label", {}, label, input);
  const template = el("input", { name: "template", placeholder: "base", list: "templates" });
  const image = el("input", { name: "image", placeholder: "python:3.12-slim (instead of a template)" });
  const name = el("input", { name: "name", placeholder: "optional" });
  const cpu = el("input", { name: "cpu", type: "number", step: "0.1", min: "0.1", placeholder: "1" });
  const memory = el("input", { name: "memoryMB", type: "number", min: "32", placeholder: "512" });
  const disk = el("input", { name: "diskMB", type: "number", min: "16", placeholder: "daemon default" });
  const timeout = el("input", { name: "timeoutSec", type: "number", min: "1", placeholder: "300" });
  const isolation = el("select", { name: "isolation" },
    el("option", { value: "" }, "daemon default"), el("option", { value: "namespace" }, "namespace"),
    el("option", { value: "gvisor" }, "gVisor"));
  const network = el("select", { name: "network" },
    el("option", { value: "offline" }, "no internet"), el("option", { value: "internet" }, "internet"));
  const metadata = el("input", { name: "metadata", placeholder: "k=v k2=v2" });
  const submit = el("button", { type: "submit" }, "Create");
  const form = el("form.grid#create", {
    onsubmit: (event) => {
      event.preventDefault();
      const body = {};
      const number = (input) => (input.value === "" ? undefined : Number(input.value));
      if (template.value) body.template = template.value;
      if (image.value) body.image = image.value;
      if (name.value) body.name = name.value;
      body.cpu = number(cpu);
      body.memoryMB = number(memory);
      body.diskMB = number(disk);
      body.timeoutSec = number(timeout);
      if (isolation.value) body.isolation = isolation.value;
      if (network.value === "internet") body.network = { egress: true };
      const pairs = metadata.value.split(/\s+/).filter(Boolean);
      if (pairs.length) body.metadata = Object.fromEntries(pairs.map((p) => p.split(/=(.*)/s).slice(0, 2)));
      submit.disabled = true;
      guarded(async () => {
        const created = await api("POST", "/v1/sandboxes", body);
        onCreated(created);
      }).finally(() => { submit.disabled = false; });
    },
  },
  field("Template", template), field("Image", image), field("Name", name), field("CPUs", cpu),
  field("Memory (MiB)", memory), field("Disk (MiB)", disk), field("Timeout (s)", timeout),
  field("Isolation", isolation), field("Network", network), field("Metadata", metadata), submit);
  return el("section.card", {}, el("h2", {}, "New sandbox"), form);
}

/** Renders the sandboxes page into `main`; returns its teardown. */
export function sandboxesView(main) {
  const stop = new AbortController();
  const holder = el("div#sandboxes-table");
  const templates = el("datalist#templates");
  let sandboxes = new Map();
  const render = () => {
    const rows = [...sandboxes.values()].sort((a, b) => b.createdAt.localeCompare(a.createdAt));
    holder.replaceChildren(rows.length
      ? table(COLUMNS, rows, { id: "sandboxes", rowId: (s) => s.id, onRow: (s) => { location.hash = `#/sandbox/${encodeURIComponent(s.id)}`; } })
      : el("p.muted#sandboxes-empty", {}, "No sandboxes."));
  };
  const load = () => guarded(async () => {
    const page = await api("GET", "/v1/sandboxes?limit=1000");
    sandboxes = new Map(page.sandboxes.map((s) => [s.id, s]));
    render();
  });
  main.replaceChildren(el("h1", {}, "Sandboxes"), createForm((s) => { sandboxes.set(s.id, s); render(); }), templates, holder);
  load();
  api("GET", "/v1/templates").then((list) => {
    templates.replaceChildren(...list.templates.filter((t) => t.state === "ready").map((t) => el("option", { value: t.name })));
  }).catch(() => {});
  followEvents((kind, event) => {
    const id = event.data?.id || event.sandboxId;
    if (!kind.startsWith("sandbox.") || !id) return;
    if (kind === "sandbox.deleted") { sandboxes.delete(id); render(); return; }
    api("GET", `/v1/sandboxes/${encodeURIComponent(id)}`)
      .then((s) => { sandboxes.set(s.id, s); render(); })
      .catch((e) => { if (e.status === 404) { sandboxes.delete(id); render(); } else showError(e); });
  }, stop.signal);
  // Ages and expiries move on their own.
  const tick = setInterval(render, 5000);
  return () => { stop.abort(); clearInterval(tick); };
}
