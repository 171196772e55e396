// The web console in a real browser (Debian's chromium, headless, driven by playwright-core): sign
// in, create a sandbox from the form, type `echo hi` in its terminal and read `hi` back, upload a
// file and see it listed, pause it and watch the state change, delete it. A screenshot per step
// goes to $CONSOLE_ARTIFACTS. Environment: SANDBOXD_URL, SANDBOXD_TOKEN, CHROMIUM (default
// /usr/bin/chromium). Exits non-zero with the failed step.

import { chromium } from "playwright-core";
import { mkdirSync } from "node:fs";
import assert from "node:assert/strict";

const url = process.env.SANDBOXD_URL;
const token = process.env.SANDBOXD_TOKEN;
const artifacts = process.env.CONSOLE_ARTIFACTS || "console-artifacts";
mkdirSync(artifacts, { recursive: true });

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
page.setDefaultTimeout(30_000);
const errors = [];
page.on("pageerror", (e) => errors.push(String(e)));
let step = 0;
const shot = async (name) => {
  step += 1;
  await page.screenshot({ path: `${artifacts}/${String(step).padStart(2, "0")}-${name}.png`, fullPage: true });
};

try {
  // Without a key: the sign-in and nothing else.
  await page.goto(`${url}/console`);
  await page.locator("#sign-in").waitFor();
  assert.equal(await page.locator("#nav").isVisible(), false, "the navigation shows without a key");
  assert.equal(await page.locator("#sandboxes-table").count(), 0, "sandboxes show without a key");
  await shot("signed-out");

  // A wrong key is refused, and the error shown.
  await page.fill("input[name=key]", "not-a-key");
  await page.click("#sign-in button[type=submit]");
  await page.locator("#error", { hasText: "401" }).waitFor();
  await shot("wrong-key");

  await page.fill("input[name=key]", token);
  await page.click("#sign-in button[type=submit]");
  await page.locator("#create").waitFor();
  await shot("signed-in");

  // Create from the form: the row appears, running.
  await page.fill("#create input[name=memoryMB]", "256");
  await page.fill("#create input[name=timeoutSec]", "600");
  await page.fill("#create input[name=metadata]", "from=console");
  await page.click("#create button[type=submit]");
  const row = page.locator("#sandboxes tbody tr", { hasText: "from=console" });
  await row.locator('[data-state="running"]').waitFor();
  const id = await row.getAttribute("data-id");
  assert.match(id, /^sb/);
  assert.match(await row.innerText(), /namespace/, "the row shows the sandbox's isolation tier");
  await shot("created");

  // The table follows the event stream: a sandbox made and deleted elsewhere comes and goes.
  const call = (method, path, body) => fetch(`${url}${path}`, {
    method,
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: body && JSON.stringify(body),
  });
  const other = await (await call("POST", "/v1/sandboxes", { metadata: { from: "elsewhere" } })).json();
  await page.locator(`#sandboxes tr[data-id="${other.id}"]`).waitFor();
  await shot("live-created");
  assert.equal((await call("DELETE", `/v1/sandboxes/${other.id}`)).status, 204);
  await page.locator(`#sandboxes tr[data-id="${other.id}"]`).waitFor({ state: "detached" });

  // Volumes: made on their page; a sandbox's page shows what it mounts; deleted once unmounted.
  const go = (hash) => page.evaluate((h) => { location.hash = h; }, hash);
  await go("#/volumes");
  await page.fill("#create-volume input[name=name]", "console-vol");
  await page.click("#create-volume button[type=submit]");
  const volumeRow = page.locator('#volumes tr[data-id="console-vol"]');
  await volumeRow.waitFor();
  await shot("volume-created");
  const mounted = await (await call("POST", "/v1/sandboxes", { volumes: [{ name: "console-vol", path: "/data" }] })).json();
  await go(`#/sandbox/${mounted.id}`);
  await page.locator("#mounts", { hasText: "console-vol at /data" }).waitFor();
  await shot("mounts");
  assert.equal((await call("DELETE", `/v1/sandboxes/${mounted.id}`)).status, 204);
  await go("#/volumes");
  await volumeRow.waitFor();
  page.once("dialog", (d) => d.accept());
  await volumeRow.locator("button.danger").click();
  await volumeRow.waitFor({ state: "detached" });

  // Warm pools: a size set on the Templates page is the pool's, shown in its table; emptied again.
  await go("#/templates");
  await page.fill("#set-warm-pool input[name=template]", "base");
  await page.fill("#set-warm-pool input[name=size]", "1");
  await page.click("#set-warm-pool button[type=submit]");
  const poolRow = page.locator('#warm-pools tr[data-id="base"]');
  await poolRow.waitFor();
  assert.match(await poolRow.innerText(), /^base\s+1\s/);
  await shot("warm-pool");
  assert.equal((await call("PUT", "/v1/warm-pools/base", { size: 0 })).status, 200);

  // Secrets: made on their page with a value typed once; the page shows the name and placeholder,
  // never the value (no answer carries it); deleted from the page.
  const secretValue = "sk-console-never-shown-4242";
  await go("#/secrets");
  await page.fill("#create-secret input[name=name]", "console_key");
  await page.fill("#create-secret input[name=value]", secretValue);
  await page.fill("#create-secret input[name=hosts]", "api.example.com");
  await page.click("#create-secret button[type=submit]");
  const secretRow = page.locator('#secrets tr[data-id="console_key"]');
  await secretRow.waitFor();
  assert.match(await secretRow.innerText(), /\$\{sandboxd\.secrets\.console_key\}[\s\S]*api\.example\.com/);
  assert.ok(!(await page.content()).includes(secretValue), "the page shows a secret's value");
  await shot("secret-created");
  page.once("dialog", (d) => d.accept());
  await secretRow.locator("button.danger").click();
  await secretRow.waitFor({ state: "detached" });
  await go("#/");
  await row.waitFor();

  // Its page: the terminal answers.
  await row.click();
  await page.locator("#terminal .xterm-rows").waitFor();
  await page.waitForFunction(() => /[$#] *$/m.test(document.querySelector("#terminal .xterm-rows").innerText));
  await page.click("#terminal");
  await page.keyboard.type("echo h''i\n");
  await page.waitForFunction(() => document.querySelector("#terminal .xterm-rows").innerText
    .split("\n").some((line) => line.trim() === "hi"));
  await shot("terminal");

  // Upload a file: it is listed.
  await page.setInputFiles("#upload", { name: "hello.txt", mimeType: "text/plain", buffer: Buffer.from("hello from the console\n") });
  await page.locator('#file-list tr[data-id="hello.txt"]').waitFor();
  await shot("uploaded");

  // Pause: the state changes to paused.
  await page.click("#pause");
  await page.locator('#summary [data-state="paused"]').waitFor();
  // A namespace sandbox's memory is frozen in RAM, and the page says what that survives.
  assert.match(await page.locator("#summary").innerText(), /memory frozen in RAM \(lost on a host reboot\)/);
  await shot("paused");

  // Delete: back at the table, the sandbox gone.
  page.once("dialog", (d) => d.accept());
  await page.click("#delete");
  await page.locator("#create").waitFor();
  await page.waitForFunction((gone) => !document.querySelector(`#sandboxes tr[data-id="${gone}"]`), id);
  await shot("deleted");

  assert.deepEqual(errors, [], "the page threw");
  console.log(`console: ok (${step} screenshots in ${artifacts})`);
} catch (e) {
  await shot("failure").catch(() => {});
  console.error(`console: failed at step ${step + 1}: ${e.stack || e}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
