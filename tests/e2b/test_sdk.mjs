// Acceptance test: the real, unmodified `e2b` JS SDK against a sandboxd daemon.
//
// Environment: E2B_API_URL and E2B_SANDBOX_URL = http://127.0.0.1:PORT (the daemon), E2B_API_KEY = a
// daemon token, E2B_DOMAIN unset. Install the SDK with `npm install --prefix tests/e2b e2b`, then run
// `node tests/e2b/test_sdk.mjs`; the exit status is 0 when every check passed.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { createRequire } from 'node:module'
import { CommandExitError, Sandbox } from 'e2b'

const run = randomUUID().slice(0, 12)
const created = new Set()

async function newSandbox(purpose, opts = {}) {
  // A unique metadata value per sandbox: the daemon deduplicates identical create bodies for 10 s.
  const sbx = await Sandbox.create({
    ...opts,
    metadata: { suite: 'sdk-js', run, purpose, ...(opts.metadata ?? {}) },
  })
  created.add(sbx.sandboxId)
  return sbx
}

const checks = {
  async createWithMetadataAndEnvs() {
    const sbx = await newSandbox('create', { envs: { GREETING: 'hello from env' } })
    try {
      const info = await sbx.getInfo()
      assert.equal(info.sandboxId, sbx.sandboxId)
      assert.equal(info.metadata.purpose, 'create')
      assert.equal(info.state, 'running')
      const r = await sbx.commands.run('echo $GREETING')
      assert.equal(r.stdout, 'hello from env\n')
      assert.equal(await sbx.isRunning(), true)
    } finally {
      await sbx.kill()
    }
  },

  async commandsRun() {
    const sbx = await newSandbox('commands')
    try {
      const r = await sbx.commands.run('echo out; echo err >&2; pwd')
      assert.equal(r.exitCode, 0)
      assert.equal(r.stdout, 'out\n/home/user\n')
      assert.equal(r.stderr, 'err\n')
      const chunks = []
      await sbx.commands.run('echo streamed', { onStdout: (d) => chunks.push(d) })
      assert.equal(chunks.join(''), 'streamed\n')
      await assert.rejects(sbx.commands.run('echo bad >&2; exit 4'), (e) => {
        assert.ok(e instanceof CommandExitError, `${e}`)
        assert.equal(e.exitCode, 4)
        assert.equal(e.stderr, 'bad\n')
        return true
      })
    } finally {
      await sbx.kill()
    }
  },

  async filesWriteAndRead() {
    const sbx = await newSandbox('files')
    try {
      await sbx.files.write('/home/user/hello.txt', 'hello from js\n')
      assert.equal(await sbx.files.read('/home/user/hello.txt'), 'hello from js\n')
      const bytes = new Uint8Array(4096).map((_, i) => i % 251)
      await sbx.files.write('/home/user/blob.bin', bytes)
      const back = await sbx.files.read('/home/user/blob.bin', { format: 'bytes' })
      assert.deepEqual(Buffer.from(back), Buffer.from(bytes))
      const entries = (await sbx.files.list('/home/user')).map((e) => e.name)
      assert.ok(entries.includes('hello.txt') && entries.includes('blob.bin'), `${entries}`)
      assert.equal((await sbx.commands.run('cat /home/user/hello.txt')).stdout, 'hello from js\n')
    } finally {
      await sbx.kill()
    }
  },

  async kill() {
    const sbx = await newSandbox('kill')
    assert.equal(await sbx.kill(), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill reports false')
    assert.equal(await sbx.isRunning(), false)
  },
}

async function main() {
  for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
    if (!process.env[v]) {
      console.error(`${v} must be set`)
      return 2
    }
  }
  if (process.env.E2B_DOMAIN) {
    console.error('E2B_DOMAIN must be unset')
    return 2
  }
  const require = createRequire(import.meta.url)
  const version = require('e2b/package.json').version
  console.log(`e2b (JS) ${version} against ${process.env.E2B_API_URL}`)
  const failed = []
  try {
    for (const [name, check] of Object.entries(checks)) {
      const started = Date.now()
      try {
        await check()
        console.log(`PASS  ${name} [${((Date.now() - started) / 1000).toFixed(1)}s]`)
      } catch (e) {
        failed.push(name)
        console.log(`FAIL  ${name}\n${e?.stack ?? e}`)
      }
    }
  } finally {
    for (const id of created) {
      await Sandbox.kill(id).catch(() => {})
    }
  }
  const total = Object.keys(checks).length
  console.log(`\n${total - failed.length} passed, ${failed.length} failed`)
  return failed.length ? 1 : 0
}

process.exitCode = await main()
