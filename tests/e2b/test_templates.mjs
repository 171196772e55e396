// Acceptance test: templates and snapshots through the real, unmodified `e2b` JS SDK. Environment as
// for test_sdk.mjs; exit status 0 when every check passed. Run by
// crates/sandboxd/tests/e2b_templates.rs.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Sandbox, Template } from 'e2b'

const run = randomUUID().slice(0, 8)

function newSandbox(template) {
  // A unique metadata value: identical create bodies within 10 s share one sandbox.
  const opts = { metadata: { suite: 'templates-js', run, n: randomUUID() } }
  return template ? Sandbox.create(template, opts) : Sandbox.create(opts)
}

async function snapshotThenCreateFromIt() {
  const sbx = await newSandbox()
  let fromSnapshot
  try {
    await sbx.files.write('/home/user/note.txt', 'written before the js snapshot')
    const snap = await sbx.createSnapshot()
    assert.ok(snap.snapshotId.startsWith(`snapshot-${sbx.sandboxId}-`), snap.snapshotId)
    fromSnapshot = await newSandbox(snap.snapshotId)
    assert.equal(await fromSnapshot.files.read('/home/user/note.txt'), 'written before the js snapshot')
    const page = sbx.listSnapshots()
    const ids = (await page.nextItems()).map((s) => s.snapshotId)
    assert.deepEqual(ids, [snap.snapshotId])
    await fromSnapshot.kill()
    fromSnapshot = undefined
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false)
  } finally {
    if (fromSnapshot) await fromSnapshot.kill()
    await sbx.kill()
  }
}

async function buildCopyRun() {
  const ctx = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-js-ctx-'))
  fs.mkdirSync(path.join(ctx, 'data'))
  fs.writeFileSync(path.join(ctx, 'data', 'js.txt'), 'copied by js\n')
  const template = Template({ fileContextPath: ctx })
    .fromTemplate('base')
    .copy('data', '/srv/js')
    .runCmd('echo js-run > /srv/js-run.txt', { user: 'root' })
  const alias = `tpl-js-${run}`
  await Template.build(template, alias)
  const sbx = await newSandbox(alias)
  try {
    assert.equal(await sbx.files.read('/srv/js/js.txt'), 'copied by js\n')
    assert.equal(await sbx.files.read('/srv/js-run.txt'), 'js-run\n')
  } finally {
    await sbx.kill()
  }
  assert.equal(await Sandbox.deleteSnapshot(alias), true)
}

let failed = 0
for (const [name, check] of Object.entries({ snapshotThenCreateFromIt, buildCopyRun })) {
  try {
    await check()
    console.log(`ok   ${name}`)
  } catch (e) {
    failed += 1
    console.log(`FAIL ${name}`)
    console.log(e)
  }
}
if (failed) {
  console.log(`${failed} failed`)
  process.exit(1)
}
console.log('all passed')
