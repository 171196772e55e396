// Templates (build state and log, warm pools), webhooks (their delivery attempts) and API keys.

import { api } from "./api.js";
import { el, guarded, stateBadge, table } from "./ui.js";

const enc = encodeURIComponent;

export function templatesView(main) {
  const list = el("div#templates-list");
  const log = el("pre#template-log", { hidden: true });
  const showLog = (t) => guarded(async () => {
    const response = await api("GET", `/v1/templates/${enc(t.name)}/logs`, undefined, { raw: true });
    const lines = (await response.text()).split("\n").filter(Boolean).map((l) => JSON.parse(l).line);
    log.hidden = false;
    log.textContent = lines.length ? lines.join("\n") : "(no log)";
  });
  guarded(async () => {
    const { templates } = await api("GET", "/v1/templates");
    list.replaceChildren(templates.length
      ? table([["Name", (t) => t.name], ["State", (t) => stateBadge(t.state)], ["Image", (t) => el("span.mono", {}, t.image || "")],
        ["Error", (t) => t.error || ""], ["", (t) => el("button.plain", { type: "button", onclick: () => showLog(t) }, "Log")]], templates)
      : el("p.muted", {}, "No templates."));
  });
  main.replaceChildren(el("h1", {}, "Templates"), list, log, warmPools());
}

// Warm pools: sandboxes of a template booted ahead of creates (admin keys); sizes set here.
function warmPools() {
  const list = el("div#warm-pools-list");
  const template = el("input", { name: "template", required: true, placeholder: "base" });
  const size = el("input", { name: "size", type: "number", min: "0", max: "1000", required: true, placeholder: "10" });
  const load = () => guarded(async () => {
    const { warmPools } = await api("GET", "/v1/warm-pools");
    list.replaceChildren(warmPools.length
      ? table([["Template", (p) => p.template], ["Size", (p) => String(p.size)], ["Ready", (p) => String(p.ready)],
        ["Booting", (p) => String(p.warming)], ["Hits", (p) => String(p.hits)], ["Misses", (p) => String(p.misses)],
        ["Last boot", (p) => (p.lastRefillMs == null ? "—" : `${p.lastRefillMs} ms`)]], warmPools,
        { id: "warm-pools", rowId: (p) => p.template })
      : el("p.muted", {}, "No warm pools."));
  });
  const form = el("form.grid#set-warm-pool", {
    onsubmit: (event) => {
      event.preventDefault();
      guarded(async () => {
        await api("PUT", `/v1/warm-pools/${enc(template.value.trim())}`, { size: Number(size.value) });
        await load();
      });
    },
  }, el("label", {}, "Template", template), el("label", {}, "Size", size), el("button", { type: "submit" }, "Set pool size"));
  load();
  return el("section", {}, el("h2", {}, "Warm pools"), el("section.card", {}, form), list);
}

export function webhooksView(main) {
  const list = el("div#webhooks-list");
  const attempts = el("div#webhook-deliveries");
  const showDeliveries = (w) => guarded(async () => {
    const { deliveries } = await api("GET", `/v1/webhooks/${enc(w.id)}/deliveries`);
    attempts.replaceChildren(el("h2", {}, `Deliveries to ${w.url}`), deliveries.length
      ? table([["Event", (d) => d.type], ["State", (d) => stateBadge(d.state)], ["Queued", (d) => new Date(d.createdAt).toLocaleString()],
        ["Attempts", (d) => d.attempts.map((a) => `#${a.attempt} ${a.status ?? ""} ${a.error ?? ""}`.trim()).join("; ")]], deliveries)
      : el("p.muted", {}, "No deliveries yet."));
  });
  guarded(async () => {
    const { webhooks } = await api("GET", "/v1/webhooks");
    list.replaceChildren(webhooks.length
      ? table([["URL", (w) => w.url], ["Events", (w) => w.events.join(", ") || "all"], ["Created", (w) => new Date(w.createdAt).toLocaleString()],
        ["", (w) => el("button.plain", { type: "button", onclick: () => showDeliveries(w) }, "Deliveries")]], webhooks)
      : el("p.muted", {}, "No webhooks."));
  });
  main.replaceChildren(el("h1", {}, "Webhooks"), list, attempts);
}

export function keysView(main) {
  const list = el("div#keys-list");
  const secret = el("div");
  const name = el("input", { name: "name", required: true, placeholder: "ci" });
  const scope = el("select", { name: "scope" }, el("option", { value: "user" }, "user"), el("option", { value: "admin" }, "admin"));
  const load = () => guarded(async () => {
    const { apiKeys } = await api("GET", "/v1/api-keys");
    list.replaceChildren(table([["Name", (k) => k.name], ["Scope", (k) => k.scope], ["Prefix", (k) => el("span.mono", {}, k.prefix || "")],
      ["", (k) => (k.configured ? el("span.muted", {}, "configured") : el("button.danger", { type: "button", onclick: () => revoke(k) }, "Revoke"))]], apiKeys));
  });
  const revoke = (k) => guarded(async () => {
    if (!confirm(`Revoke ${k.name}? Requests with it are refused from now on.`)) return;
    await api("DELETE", `/v1/api-keys/${enc(k.id)}`);
    await load();
  });
  const form = el("form.grid", {
    onsubmit: (event) => {
      event.preventDefault();
      guarded(async () => {
        const created = await api("POST", "/v1/api-keys", { name: name.value, scope: scope.value });
        secret.replaceChildren(el("p.secret", {}, "Shown once: ", el("span.mono", {}, created.key)));
        name.value = "";
        await load();
      });
    },
  }, el("label", {}, "Name", name), el("label", {}, "Scope", scope), el("button", { type: "submit" }, "Create key"));
  load();
  main.replaceChildren(el("h1", {}, "API keys"), el("section.card", {}, form, secret), list);
}
