// Volumes: named storage that outlives sandboxes — list, create, delete (refused while mounted).

import { api } from "./api.js";
import { age, el, guarded, table } from "./ui.js";

const enc = encodeURIComponent;

const size = (mb) => (mb ? `${mb} MiB` : "unlimited");

export function volumesView(main) {
  const list = el("div#volumes-list");
  const name = el("input", { name: "name", required: true, placeholder: "datasets", pattern: "[A-Za-z0-9][A-Za-z0-9._\\-]{0,62}" });
  const sizeMB = el("input", { name: "sizeMB", type: "number", min: "1", placeholder: "unlimited" });
  const load = () => guarded(async () => {
    const { volumes } = await api("GET", "/v1/volumes");
    list.replaceChildren(volumes.length
      ? table([["Name", (v) => v.name], ["ID", (v) => el("span.mono", {}, v.id)], ["Size", (v) => size(v.sizeMB)],
        ["Age", (v) => age(v.createdAt)],
        ["", (v) => el("button.danger", { type: "button", onclick: () => remove(v) }, "Delete")]], volumes,
        { id: "volumes", rowId: (v) => v.name })
      : el("p.muted", {}, "No volumes."));
  });
  const remove = (v) => guarded(async () => {
    if (!confirm(`Delete volume ${v.name} and every file in it?`)) return;
    await api("DELETE", `/v1/volumes/${enc(v.name)}`);
    await load();
  });
  const form = el("form.grid#create-volume", {
    onsubmit: (event) => {
      event.preventDefault();
      guarded(async () => {
        const body = { name: name.value.trim() };
        if (sizeMB.value) body.sizeMB = Number(sizeMB.value);
        await api("POST", "/v1/volumes", body);
        name.value = "";
        sizeMB.value = "";
        await load();
      });
    },
  }, el("label", {}, "Name", name), el("label", {}, "Size (MiB)", sizeMB), el("button", { type: "submit" }, "Create volume"));
  load();
  main.replaceChildren(el("h1", {}, "Volumes"), el("section.card", {}, form), list);
}
