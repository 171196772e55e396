// The console's shell: sign-in, navigation, and the router over `location.hash`.

import { api, session } from "./api.js";
import { el, showError } from "./ui.js";
import { sandboxesView } from "./sandboxes.js";
import { sandboxView } from "./sandbox.js";
import { keysView, templatesView, webhooksView } from "./admin.js";
import { secretsView } from "./secrets.js";
import { volumesView } from "./volumes.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
let leaving = () => {};

function signInView(message) {
  nav.hidden = true;
  const key = el("input", { type: "password", name: "key", placeholder: "e2b_… or the admin token", autocomplete: "off", required: true });
  const form = el("form.card#sign-in", {
    onsubmit: async (event) => {
      event.preventDefault();
      session.key = key.value.trim();
      try {
        await api("GET", "/v1/sandboxes?limit=1");
        showError(null);
        route();
      } catch (e) {
        session.key = null;
        showError(e);
      }
    },
  },
  el("h1", {}, "Sign in"),
  el("p.muted", {}, "An API key of this daemon. It is kept for this browser session only."),
  el("p", {}, el("label", {}, "API key", key)),
  el("button", { type: "submit" }, "Sign in"));
  main.replaceChildren(el("div.signin", {}, form));
  if (message) showError(new Error(message));
  key.focus();
}

session.onSignedOut = (message) => { leaving(); leaving = () => {}; signInView(message); };

document.getElementById("sign-out").addEventListener("click", () => {
  session.key = null;
  location.hash = "#/";
  session.onSignedOut();
});

async function route() {
  leaving();
  leaving = () => {};
  if (!session.key) return signInView();
  nav.hidden = false;
  showError(null);
  const [, page, arg] = location.hash.replace(/^#\/?/, "/").split("/");
  const view = {
    "": () => sandboxesView(main),
    sandbox: () => sandboxView(main, decodeURIComponent(arg || "")),
    templates: () => templatesView(main),
    volumes: () => volumesView(main),
    secrets: () => secretsView(main),
    webhooks: () => webhooksView(main),
    keys: () => keysView(main),
  }[page || ""];
  leaving = (view ? view() : sandboxesView(main)) || (() => {});
}

window.addEventListener("hashchange", route);
route();
