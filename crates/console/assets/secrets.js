// Secrets: names, hosts and versions only. A value is typed once into a password field, sent, and
// cleared; no answer of the daemon carries one back, so this page can never show one.

import { api } from "./api.js";
import { age, el, guarded, table } from "./ui.js";

export function secretsView(main) {
  const list = el("div#secrets-list");
  const name = el("input", { name: "name", required: true, placeholder: "openai", pattern: "[A-Za-z0-9_][A-Za-z0-9_.\\-]{0,127}" });
  const value = el("input", { name: "value", type: "password", required: true, autocomplete: "off" });
  const hosts = el("input", { name: "hosts", placeholder: "api.openai.com, *.example.com" });
  const load = () => guarded(async () => {
    const { secrets } = await api("GET", "/v1/secrets");
    const columns = [["Name", (s) => s.name], ["Placeholder", (s) => el("span.mono", {}, s.placeholder)],
      ["Hosts", (s) => s.hosts.join(", ") || "—"], ["Version", (s) => String(s.version)],
      ["Updated", (s) => age(s.updatedAt)],
      ["", (s) => el("button.danger", { type: "button", onclick: () => drop(s) }, "Delete")]];
    list.replaceChildren(secrets.length
      ? table(columns, secrets, { id: "secrets", rowId: (s) => s.name })
      : el("p.muted", {}, "No secrets."));
  });
  const drop = (s) => guarded(async () => {
    if (!confirm(`Delete secret ${s.name}? Sandboxes that use it lose it.`)) return;
    await api("DELETE", `/v1/secrets/${encodeURIComponent(s.name)}`);
    await load();
  });
  const submit = (event) => {
    event.preventDefault();
    guarded(async () => {
      const body = { name: name.value.trim(), value: value.value };
      const given = hosts.value.split(",").map((h) => h.trim()).filter(Boolean);
      if (given.length) body.hosts = given;
      value.value = "";
      await api("POST", "/v1/secrets", body);
      name.value = "";
      hosts.value = "";
      await load();
    });
  };
  const form = el("form.grid#create-secret", { onsubmit: submit },
    el("label", {}, "Name", name), el("label", {}, "Value", value), el("label", {}, "Hosts", hosts),
    el("button", { type: "submit" }, "Create secret"));
  load();
  main.replaceChildren(el("h1", {}, "Secrets"), el("section.card", {}, form), list);
}
