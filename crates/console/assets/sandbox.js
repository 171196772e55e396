// One sandbox: its state and actions, a terminal, its files, ports, events and resource charts.

import { api, followEvents, terminalSocket } from "./api.js";
import { age, el, guarded, showError, sparkline, stateBadge, table } from "./ui.js";

const enc = encodeURIComponent;

function summary(s) {
  return el("section.card#summary", {},
    el("p", {}, el("span.mono", {}, s.id), " ", stateBadge(s.state), s.name ? ` ${s.name}` : ""),
    el("p.muted", {},
      `${s.image || s.template} · ${s.isolation || "namespace"} · ${s.cpu} CPU · ${s.memoryMB} MiB · disk ${s.diskMB || "—"} MiB · age ${age(s.createdAt)}`,
      s.pausedMemory === "ram" ? " · memory frozen in RAM (lost on a host reboot)" : "",
      s.pausedMemory === "disk" ? " · memory checkpointed to disk (survives a restart)" : "",
      s.expiresAt ? ` · expires ${new Date(s.expiresAt).toLocaleString()}` : "",
      s.failureReason ? ` · ${s.failureReason}` : ""),
    (s.volumes || []).length
      ? el("p.muted#mounts", {}, "Volumes: ", (s.volumes || [])
        .map((v) => `${v.name}${v.subpath ? `:${v.subpath}` : ""} at ${v.path}${v.readOnly ? " (read-only)" : ""}`).join(", "))
      : "");
}

function terminal(id, box) {
  const term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 13 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  const socket = terminalSocket(id, term.cols, term.rows);
  const encoder = new TextEncoder();
  socket.onmessage = (m) => {
    if (typeof m.data === "string") {
      const notice = JSON.parse(m.data);
      term.write(notice.type === "exit" ? `\r\n[exited with ${notice.exitCode}]\r\n` : `\r\n[${notice.message}]\r\n`);
    } else {
      term.write(new Uint8Array(m.data));
    }
  };
  socket.onclose = () => term.write("\r\n[disconnected]\r\n");
  socket.onerror = () => showError(new Error("the terminal's connection failed"));
  term.onData((data) => { if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data)); });
  term.onResize(({ cols, rows }) => {
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "resize", cols, rows }));
  });
  const onWindow = () => fit.fit();
  window.addEventListener("resize", onWindow);
  return () => { window.removeEventListener("resize", onWindow); socket.close(); term.dispose(); };
}

function files(id) {
  const box = el("div#files");
  const where = el("input#files-path", { value: "/home/user" });
  const upload = el("input#upload", { type: "file" });
  const list = () => guarded(async () => {
    const path = where.value.replace(/\/+$/, "") || "/";
    const listing = await api("GET", `/v1/sandboxes/${enc(id)}/files/list?path=${enc(path)}`);
    box.replaceChildren(table([
      ["Name", (f) => (f.type === "dir"
        ? el("a", { href: "#", onclick: (e) => { e.preventDefault(); where.value = f.path; list(); } }, `${f.name}/`)
        : f.name)],
      ["Size", (f) => (f.type === "dir" ? "" : f.size)],
      ["Mode", (f) => el("span.mono", {}, f.permissions)],
      ["", (f) => el("span", {},
        f.type === "dir" ? "" : el("button.plain", { type: "button", onclick: () => download(f) }, "Download"), " ",
        el("button.danger", { type: "button", onclick: () => remove(f) }, "Delete"))],
    ], listing.entries, { id: "file-list", rowId: (f) => f.name }));
  });
  const download = (f) => guarded(async () => {
    const response = await api("GET", `/v1/sandboxes/${enc(id)}/files?path=${enc(f.path)}`, undefined, { raw: true });
    const url = URL.createObjectURL(await response.blob());
    el("a", { href: url, download: f.name }).click();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
  const remove = (f) => guarded(async () => {
    if (!confirm(`Delete ${f.path}?`)) return;
    await api("DELETE", `/v1/sandboxes/${enc(id)}/files?path=${enc(f.path)}&recursive=true`);
    await list();
  });
  upload.addEventListener("change", () => guarded(async () => {
    for (const file of upload.files) {
      const path = `${where.value.replace(/\/+$/, "")}/${file.name}`;
      await api("PUT", `/v1/sandboxes/${enc(id)}/files?path=${enc(path)}`, file);
    }
    upload.value = "";
    await list();
  }));
  list();
  return el("section.card", {}, el("h2", {}, "Files"),
    el("div.actions", {}, el("label", {}, "Directory", where),
      el("button.plain", { type: "button", onclick: list }, "List"), el("label", {}, "Upload", upload)),
    box);
}

function ports(id) {
  const box = el("div#ports");
  guarded(async () => {
    const exposed = await api("GET", `/v1/sandboxes/${enc(id)}/ports`);
    box.replaceChildren(exposed.length
      ? table([["Port", (p) => p.port], ["Protocol", (p) => p.protocol],
        ["URL", (p) => (p.protocol === "http" ? el("a", { href: p.publicUrl, target: "_blank", rel: "noopener" }, p.publicUrl) : p.publicUrl)]], exposed)
      : el("p.muted", {}, "No exposed ports."));
  });
  return el("section.card", {}, el("h2", {}, "Ports"), box);
}

function history(id) {
  const events = el("div#events", {}, el("p.muted", {}, "Waiting for events…"));
  const deliveries = el("div#deliveries");
  const seen = [];
  guarded(async () => {
    const list = await api("GET", `/v1/sandboxes/${enc(id)}/agent-events`);
    deliveries.replaceChildren(list.events.length
      ? table([["Event", (e) => e.event], ["Delivery", (e) => el("span.mono", {}, e.deliveryId)], ["Received", (e) => new Date(e.receivedAt).toLocaleTimeString()]], list.events)
      : el("p.muted", {}, "No agent deliveries."));
  });
  const add = (kind, event) => {
    seen.unshift({ kind, at: event.timestamp });
    events.replaceChildren(table([["Event", (e) => e.kind], ["At", (e) => new Date(e.at).toLocaleTimeString()]], seen.slice(0, 50), { id: "event-list" }));
  };
  return { node: el("div.split", {}, el("section.card", {}, el("h2", {}, "Events (live)"), events),
    el("section.card", {}, el("h2", {}, "Agent deliveries"), deliveries)), add };
}

function egress(id) {
  const box = el("div#egress");
  guarded(async () => {
    const { requests } = await api("GET", `/v1/sandboxes/${enc(id)}/egress`);
    box.replaceChildren(requests.length
      ? table([["Host", (r) => r.host], ["Request", (r) => `${r.method} ${r.path}`], ["Status", (r) => String(r.status)],
        ["Rule", (r) => r.rule || "—"], ["Secrets", (r) => r.secrets.join(", ") || "—"],
        ["Bytes out / in", (r) => `${r.sent} / ${r.received}`], ["ms", (r) => String(r.millis)]],
      requests.slice().reverse(), { id: "egress-list" })
      : el("p.muted", {}, "No request went through the egress gateway."));
  });
  return el("section.card", {}, el("h2", {}, "Egress gateway"), box);
}

function charts(id) {
  const box = el("div.split#charts");
  const samples = [];
  const sample = async () => {
    try {
      const [m] = await api("GET", `/sandboxes/${enc(id)}/metrics`);
      if (!m) return;
      samples.push(m);
      if (samples.length > 60) samples.shift();
      const chart = (title, values, note) => el("div", {}, el("p.muted", {}, `${title} ${note}`), sparkline(values, title));
      const last = samples[samples.length - 1];
      box.replaceChildren(
        chart("CPU %", samples.map((x) => x.cpuUsedPct), `${last.cpuUsedPct}%`),
        chart("Memory", samples.map((x) => x.memUsed), `${(last.memUsed / 2 ** 20).toFixed(1)} / ${(last.memTotal / 2 ** 20).toFixed(0)} MiB`),
        chart("Disk", samples.map((x) => x.diskUsed), `${(last.diskUsed / 2 ** 20).toFixed(1)} / ${(last.diskTotal / 2 ** 20).toFixed(0)} MiB`));
    } catch { /* a paused or stopped sandbox has no sample */ }
  };
  sample();
  const timer = setInterval(sample, 5000);
  return { node: el("section.card", {}, el("h2", {}, "Resources"), box), stop: () => clearInterval(timer) };
}

/** Renders sandbox `id` into `main`; returns its teardown. */
export function sandboxView(main, id) {
  const stop = new AbortController();
  const cleanups = [() => stop.abort()];
  const head = el("div#summary-holder");
  const act = (verb) => guarded(async () => { render(await api("POST", `/v1/sandboxes/${enc(id)}/${verb}`)); });
  const actions = el("div.actions", {},
    el("button.plain#pause", { type: "button", onclick: () => act("pause") }, "Pause"),
    el("button.plain#resume", { type: "button", onclick: () => act("resume") }, "Resume"),
    el("button.danger#delete", { type: "button", onclick: () => guarded(async () => {
      if (!confirm(`Delete sandbox ${id}?`)) return;
      await api("DELETE", `/v1/sandboxes/${enc(id)}`);
      location.hash = "#/";
    }) }, "Delete"));
  const render = (s) => head.replaceChildren(summary(s));
  const termBox = el("div#terminal");
  const events = history(id);
  const resources = charts(id);
  cleanups.push(resources.stop);
  main.replaceChildren(el("h1", {}, el("a", { href: "#/" }, "Sandboxes"), " / ", id), head, actions,
    el("section.card", {}, el("h2", {}, "Terminal"), termBox), files(id), ports(id), resources.node, egress(id), events.node);
  guarded(async () => {
    const s = await api("GET", `/v1/sandboxes/${enc(id)}`);
    render(s);
    if (s.state === "running") cleanups.push(terminal(id, termBox));
    else termBox.replaceChildren(el("p.muted", {}, `No terminal: the sandbox is ${s.state}.`));
  });
  followEvents((kind, event) => {
    if ((event.data?.id || event.data?.sandboxId) !== id) return;
    events.add(kind, event);
    if (kind === "sandbox.deleted") { showError(new Error(`sandbox ${id} was deleted`)); return; }
    api("GET", `/v1/sandboxes/${enc(id)}`).then(render).catch(showError);
  }, stop.signal);
  return () => cleanups.forEach((f) => f());
}
