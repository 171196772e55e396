// Acceptance test: images, builds, snapshots and idle intervals through the real, unmodified
// @daytonaio/sdk (TypeScript).
//
// A sandbox from an image string and from an `Image` builder (runCommands, env, workdir); an
// unknown image is not found; a snapshot from a builder with its log streamed to `onLogs`, got,
// listed, used by a create, deleted; `createSnapshot` and `fork` copy a sandbox's filesystem; the
// idle intervals are set and read back.
//
// Environment: DAYTONA_API_URL (the daemon's URL + `/api`), DAYTONA_API_KEY (a daemon token); the
// daemon pulls through a mirror serving `python:3.12-slim` (a busybox image holding
// /app/hello.txt). Exit status 0 = every check passed. Run by crates/sandboxd/tests/daytona_images.rs.

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Daytona, DaytonaNotFoundError, Image } from '@daytonaio/sdk'

const RUN = randomBytes(4).toString('hex')
const daytona = new Daytona()
const made = []

async function create(params) {
  const sandbox = await daytona.create({ ...params, labels: { images: RUN } }, { timeout: 300 })
  made.push(sandbox)
  return sandbox
}

async function run(sandbox, command) {
  const out = await sandbox.process.executeCommand(command)
  assert.equal(out.exitCode, 0, `${command}: ${out.result}`)
  return out.result.trim()
}

const tests = {
  async fromAnImageString() {
    const sandbox = await create({ image: 'python:3.12-slim' })
    assert.equal(sandbox.state, 'started')
    assert.equal(await run(sandbox, 'cat /app/hello.txt'), 'hello from the image')
  },

  async fromAnImageBuilder() {
    const image = Image.base('python:3.12-slim')
      .runCommands(`echo ts-built-${RUN} > /built.txt`)
      .env({ GREETING: 'hello ts' })
      .workdir('/srv')
    const logs = []
    const sandbox = await daytona.create({ image, labels: { images: RUN } }, { timeout: 300, onSnapshotCreateLogs: (l) => logs.push(l) })
    made.push(sandbox)
    assert.ok(logs.join('\n').includes(`ts-built-${RUN}`), logs.join('\n'))
    assert.equal(await run(sandbox, 'cat /built.txt'), `ts-built-${RUN}`)
    assert.equal(await run(sandbox, 'echo $GREETING'), 'hello ts')
    assert.equal(await run(sandbox, 'pwd'), '/srv')
  },

  async anUnknownImageIsNotFound() {
    await assert.rejects(create({ image: 'no-such/image:1' }), DaytonaNotFoundError)
  },

  async snapshotsStreamTheirLogAndMakeSandboxes() {
    const name = `ts-snap-${RUN}`
    const logs = []
    const image = Image.base('python:3.12-slim').runCommands(`echo ts-snapshot-${RUN} > /snap.txt`)
    const snapshot = await daytona.snapshot.create({ name, image }, { onLogs: (l) => logs.push(l) })
    assert.equal(snapshot.state, 'active')
    assert.ok(logs.join('\n').includes(`ts-snapshot-${RUN}`), logs.join('\n'))
    assert.equal((await daytona.snapshot.get(name)).name, name)
    const listed = await daytona.snapshot.list(1, 100)
    assert.ok(listed.items.some((s) => s.name === name))
    const sandbox = await create({ snapshot: name })
    assert.equal(await run(sandbox, 'cat /snap.txt'), `ts-snapshot-${RUN}`)
    await sandbox.delete()
    await daytona.snapshot.delete(name)
    await assert.rejects(daytona.snapshot.get(name), DaytonaNotFoundError)
  },

  async createSnapshotAndForkCopyTheFilesystem() {
    const source = await create({ snapshot: 'base' })
    await run(source, 'echo ts-original > /home/user/mine.txt')
    const name = `ts-copy-${RUN}`
    await source.createSnapshot(name)
    const copy = await create({ snapshot: name })
    assert.equal(await run(copy, 'cat /home/user/mine.txt'), 'ts-original')
    const forked = await source.fork({ name: `ts-fork-${RUN}` })
    made.push(forked)
    assert.equal(forked.state, 'started')
    assert.equal(await run(forked, 'cat /home/user/mine.txt'), 'ts-original')
    await run(forked, 'echo changed > /home/user/mine.txt')
    assert.equal(await run(source, 'cat /home/user/mine.txt'), 'ts-original')
    await copy.delete()
    await forked.delete()
    await daytona.snapshot.delete(name)
    await daytona.snapshot.delete(forked.snapshot)
  },

  async idleIntervalsAreSetAndReadBack() {
    const sandbox = await create({ snapshot: 'base', autoStopInterval: 30, autoDeleteInterval: 120 })
    let got = await daytona.get(sandbox.id)
    assert.equal(got.autoStopInterval, 30)
    assert.equal(got.autoDeleteInterval, 120)
    await sandbox.setAutostopInterval(0)
    await sandbox.setAutoDeleteInterval(-1)
    await sandbox.setAutoArchiveInterval(60)
    await sandbox.refreshActivity()
    got = await daytona.get(sandbox.id)
    assert.equal(got.autoStopInterval, 0)
    assert.equal(got.autoDeleteInterval, -1)
    assert.equal(got.autoArchiveInterval, 60)
  },
}

let failed = 0
const only = process.argv.slice(2)
for (const [name, test] of Object.entries(tests)) {
  if (only.length && !only.includes(name)) continue
  const started = Date.now()
  try {
    await test()
    console.log(`ok   ${name} (${Date.now() - started} ms)`)
  } catch (e) {
    failed++
    console.log(`FAIL ${name}`)
    console.log(e)
  }
}
for (const sandbox of made) {
  try {
    await sandbox.delete()
  } catch {
    // Deleted by its test already.
  }
}
if (failed) {
  console.log(`${failed} failed`)
  process.exit(1)
}
console.log('all passed')
// The SDK keeps connections (its event socket's retries among them) that would hold node for minutes.
process.exit(0)
