// Acceptance test: the real, unmodified `e2b` JS SDK against a sandboxd daemon.
//
// Environment: E2B_API_URL and E2B_SANDBOX_URL = http://127.0.0.1:PORT (the daemon), E2B_API_KEY = a
// daemon token, E2B_DOMAIN unset. Install the SDK with `npm install --prefix tests/e2b e2b`, then run
// `node tests/e2b/test_sdk.mjs`; the exit status is 0 when every check passed. The checks mirror
// tests/e2b/test_sdk.py, through the JS SDK's own API.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import http from 'node:http'
import { createRequire } from 'node:module'
import { CommandExitError, Sandbox, SandboxNotFoundError, Volume, VolumeFileType } from 'e2b'

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

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

/** Polls `fn` until it returns a truthy value or `ms` pass; returns the last value. */
async function until(fn, ms = 10_000, every = 200) {
  const deadline = Date.now() + ms
  let v
  while (Date.now() < deadline) {
    v = await fn()
    if (v) return v
    await sleep(every)
  }
  return v
}

/** GET `path` from the daemon with extra headers (Node's fetch forbids `Host`, so node:http). */
function daemonGet(path, headers) {
  const base = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = http.request(
      { hostname: base.hostname, port: base.port, path, method: 'GET', headers, timeout: 5000 },
      (res) => {
        const chunks = []
        res.on('data', (c) => chunks.push(c))
        res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString() }))
        res.on('error', reject)
      },
    )
    req.on('timeout', () => req.destroy(new Error(`GET ${path} timed out`)))
    req.on('error', reject)
    req.end()
  })
}

const checks = {
  async createWithMetadataAndEnvs() {
    const sbx = await newSandbox('create', { envs: { GREETING: 'hello from env', OTHER: '2' } })
    try {
      const info = await sbx.getInfo()
      assert.equal(info.sandboxId, sbx.sandboxId)
      assert.equal(info.metadata.purpose, 'create', JSON.stringify(info.metadata))
      assert.equal(info.metadata.suite, 'sdk-js')
      assert.equal(info.state, 'running')
      assert.equal(info.templateId, 'base')
      assert.equal((await sbx.commands.run('echo $GREETING-$OTHER')).stdout, 'hello from env-2\n')
      // Per-command envs on top of the sandbox's.
      const r = await sbx.commands.run('echo $GREETING $EXTRA', { envs: { EXTRA: 'x' } })
      assert.equal(r.stdout, 'hello from env x\n')
      assert.equal(await sbx.isRunning(), true)
    } finally {
      await sbx.kill()
    }
  },

  async commandsRunForeground() {
    const sbx = await newSandbox('commands')
    try {
      const r = await sbx.commands.run('echo out; echo err >&2; pwd')
      assert.equal(r.exitCode, 0)
      assert.equal(r.stdout, 'out\n/home/user\n')
      assert.equal(r.stderr, 'err\n')
      assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
      assert.equal((await sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
      const chunks = []
      await sbx.commands.run('for i in 1 2 3; do echo $i; done', { onStdout: (d) => chunks.push(d) })
      assert.equal(chunks.join(''), '1\n2\n3\n')
      await assert.rejects(sbx.commands.run('echo partial; echo failing >&2; exit 3'), (e) => {
        assert.ok(e instanceof CommandExitError, `a non-zero exit must reject with CommandExitError, got ${e}`)
        assert.equal(e.exitCode, 3)
        assert.equal(e.stdout, 'partial\n')
        assert.equal(e.stderr, 'failing\n')
        return true
      })
    } finally {
      await sbx.kill()
    }
  },

  async backgroundCommandAndKill() {
    const sbx = await newSandbox('background')
    try {
      const later = await sbx.commands.run('sleep 1; echo done-later', { background: true })
      const listed = (await sbx.commands.list()).map((p) => p.pid)
      assert.ok(listed.includes(later.pid), `pid ${later.pid} not in commands.list(): ${listed}`)
      await later.disconnect()
      const again = await sbx.commands.connect(later.pid)
      const result = await again.wait()
      assert.equal(result.exitCode, 0)
      assert.ok(result.stdout.includes('done-later'), JSON.stringify(result.stdout))

      const sleeper = await sbx.commands.run('sleep 1000', { background: true })
      assert.equal(await sbx.commands.kill(sleeper.pid), true, 'killing a running command reports true')
      await assert.rejects(sleeper.wait(), (e) => {
        assert.ok(e instanceof CommandExitError, `a killed command's wait() must reject with CommandExitError, got ${e}`)
        assert.notEqual(e.exitCode, 0)
        return true
      })
      const left = (await sbx.commands.list()).map((p) => p.pid)
      assert.ok(!left.includes(sleeper.pid), `killed pid ${sleeper.pid} still listed: ${left}`)
      assert.equal(await sbx.commands.kill(sleeper.pid), false, 'killing a gone command reports false')
    } finally {
      await sbx.kill()
    }
  },

  async stdin() {
    const sbx = await newSandbox('stdin')
    try {
      const handle = await sbx.commands.run('head -n 1', { background: true, stdin: true })
      await sbx.commands.sendStdin(handle.pid, 'typed line\n')
      const result = await handle.wait()
      assert.equal(result.stdout, 'typed line\n')
    } finally {
      await sbx.kill()
    }
  },

  async pty() {
    const sbx = await newSandbox('pty')
    try {
      const out = []
      const text = () => Buffer.concat(out).toString()
      const handle = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => out.push(Buffer.from(d)) })
      await sbx.pty.sendInput(handle.pid, new TextEncoder().encode('echo pty-$((40+2))\n'))
      assert.ok(await until(() => text().includes('pty-42')), `no "pty-42" in the PTY output: ${JSON.stringify(text())}`)
      await sbx.pty.resize(handle.pid, { cols: 100, rows: 30 })
      await sbx.pty.sendInput(handle.pid, new TextEncoder().encode('echo size-$(stty size | tr " " x)\n'))
      assert.ok(await until(() => text().includes('size-30x100')), `no "size-30x100" after resize: ${JSON.stringify(text())}`)
      assert.equal(await sbx.pty.kill(handle.pid), true, 'killing the PTY reports true')
      await assert.rejects(handle.wait(), (e) => {
        assert.ok(e instanceof CommandExitError, `a killed PTY's wait() must reject with CommandExitError, got ${e}`)
        return true
      })
    } finally {
      await sbx.kill()
    }
  },

  async filesWriteAndRead() {
    const sbx = await newSandbox('files')
    try {
      const info = await sbx.files.write('/home/user/notes.txt', 'line one\nline two\n')
      assert.equal(info.path, '/home/user/notes.txt')
      assert.equal(await sbx.files.read('/home/user/notes.txt'), 'line one\nline two\n')
      const bytes = new Uint8Array(16384).map((_, i) => i % 256)
      await sbx.files.write('/home/user/blob.bin', bytes.buffer)
      const back = await sbx.files.read('/home/user/blob.bin', { format: 'bytes' })
      assert.deepEqual(Buffer.from(back), Buffer.from(bytes))
      // A relative path is relative to the user's home.
      assert.equal(await sbx.files.read('notes.txt'), 'line one\nline two\n')
      // Files written by the SDK are seen by commands, and the other way round.
      assert.equal((await sbx.commands.run('cat /home/user/notes.txt')).stdout, 'line one\nline two\n')
      await sbx.commands.run('echo from-shell > /home/user/shell.txt')
      assert.equal(await sbx.files.read('/home/user/shell.txt'), 'from-shell\n')
    } finally {
      await sbx.kill()
    }
  },

  async filesMultiWriteListAndManage() {
    const sbx = await newSandbox('files-manage')
    try {
      const infos = await sbx.files.write([
        { path: '/home/user/multi/one.txt', data: 'first' },
        { path: '/home/user/multi/two.txt', data: 'second' },
      ])
      assert.deepEqual(infos.map((i) => i.path).sort(), ['/home/user/multi/one.txt', '/home/user/multi/two.txt'])
      assert.equal(await sbx.files.read('/home/user/multi/one.txt'), 'first')
      assert.equal(await sbx.files.read('/home/user/multi/two.txt'), 'second')

      assert.equal(await sbx.files.makeDir('/home/user/dir/sub'), true)
      assert.equal(await sbx.files.makeDir('/home/user/dir/sub'), false, 'makeDir of an existing dir reports false')
      await sbx.files.write('/home/user/dir/a.txt', 'a')
      const entries = await sbx.files.list('/home/user/dir')
      const kinds = Object.fromEntries(entries.map((e) => [e.name, e.type]))
      assert.deepEqual(kinds, { 'a.txt': 'file', sub: 'dir' })

      const moved = await sbx.files.rename('/home/user/dir/a.txt', '/home/user/dir/b.txt')
      assert.equal(moved.path, '/home/user/dir/b.txt')
      assert.equal(await sbx.files.exists('/home/user/dir/a.txt'), false)
      assert.equal(await sbx.files.exists('/home/user/dir/b.txt'), true)
      assert.equal(await sbx.files.read('/home/user/dir/b.txt'), 'a')
      await sbx.files.remove('/home/user/dir/b.txt')
      assert.equal(await sbx.files.exists('/home/user/dir/b.txt'), false)
      await sbx.files.remove('/home/user/dir')
      assert.equal(await sbx.files.exists('/home/user/dir'), false)
    } finally {
      await sbx.kill()
    }
  },

  async watchDir() {
    const sbx = await newSandbox('watch')
    try {
      await sbx.files.makeDir('/home/user/watched')
      const events = []
      const watcher = await sbx.files.watchDir('/home/user/watched', (e) => events.push(e))
      try {
        await sbx.files.write('/home/user/watched/new.txt', 'x')
        const seen = await until(() => events.some((e) => e.name === 'new.txt'))
        assert.ok(seen, `no event for new.txt: ${JSON.stringify(events)}`)
        const types = new Set(events.filter((e) => e.name === 'new.txt').map((e) => e.type))
        assert.ok(types.has('create') || types.has('write'), `new.txt events: ${[...types]}`)
      } finally {
        await watcher.stop()
      }
    } finally {
      await sbx.kill()
    }
  },

  async getHostReachesAServerInTheSandbox() {
    const sbx = await newSandbox('host')
    try {
      await sbx.commands.run('mkdir -p /tmp/www && echo served-by-sandbox > /tmp/www/index.html')
      await sbx.commands.run('cd /tmp/www && nohup python3 -m http.server 8000 >/dev/null 2>&1 &')
      const host = sbx.getHost(8000)
      assert.ok(host.startsWith(`8000-${sbx.sandboxId}.`), host)
      // With E2B_SANDBOX_URL set, getHost names `{port}-{id}.{domain}`; `*.localhost` does not resolve
      // everywhere, so connect to the daemon and send the host as the Host header.
      let last
      const ok = await until(async () => {
        last = await daemonGet('/index.html', { host }).catch((e) => ({ status: 0, body: `${e}` }))
        return last.status === 200
      }, 15_000)
      assert.ok(ok, `GET /index.html with Host: ${host} -> ${last.status} ${JSON.stringify(last.body)}`)
      assert.equal(last.body, 'served-by-sandbox\n')
      // The E2B headers route the same way.
      const r = await daemonGet('/index.html', { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8000' })
      assert.equal(r.status, 200, `E2b-Sandbox-* headers -> ${r.status} ${JSON.stringify(r.body)}`)
      assert.equal(r.body, 'served-by-sandbox\n')
    } finally {
      await sbx.kill()
    }
  },

  async setTimeoutMovesEndAt() {
    const sbx = await newSandbox('timeout', { timeoutMs: 60_000 })
    try {
      const before = (await sbx.getInfo()).endAt
      await sbx.setTimeout(1_800_000)
      const after = (await sbx.getInfo()).endAt
      assert.ok(after - before > 1_500_000, `endAt ${before.toISOString()} -> ${after.toISOString()}`)
      await sbx.setTimeout(120_000)
      const shorter = (await sbx.getInfo()).endAt
      assert.ok(shorter < after, `endAt after setTimeout(120 s): ${shorter.toISOString()} (was ${after.toISOString()})`)
    } finally {
      await sbx.kill()
    }
  },

  async listWithMetadataFilterAndPaging() {
    const tag = `list-${run}`
    const ids = new Set()
    const mine = []
    try {
      for (let i = 0; i < 3; i++) {
        const s = await newSandbox('list', { metadata: { listing: tag, i: String(i) } })
        ids.add(s.sandboxId)
        mine.push(s.sandboxId)
      }
      mine.push((await newSandbox('list', { metadata: { listing: `other-${run}` } })).sandboxId)
      const paginator = Sandbox.list({ query: { metadata: { listing: tag } }, limit: 2 })
      const pages = []
      while (paginator.hasNext) pages.push(await paginator.nextItems())
      assert.deepEqual(pages.map((p) => p.length), [2, 1])
      const listed = pages.flat()
      assert.deepEqual(new Set(listed.map((s) => s.sandboxId)), ids)
      for (const s of listed) {
        assert.equal(s.metadata.listing, tag)
        assert.equal(s.state, 'running')
      }
      // A paginator started from a token resumes after the first page.
      const first = Sandbox.list({ query: { metadata: { listing: tag } }, limit: 2 })
      const page1 = await first.nextItems()
      assert.ok(first.hasNext && first.nextToken, 'a full first page has a nextToken')
      const rest = await Sandbox.list({ query: { metadata: { listing: tag } }, limit: 2, nextToken: first.nextToken }).nextItems()
      assert.deepEqual(new Set([...page1, ...rest].map((s) => s.sandboxId)), ids)
      // Special characters survive the SDK's encoding of the filter.
      const odd = await newSandbox('list', { metadata: { 'odd key': 'a&b=c d' } })
      mine.push(odd.sandboxId)
      const found = await Sandbox.list({ query: { metadata: { 'odd key': 'a&b=c d', run } } }).nextItems()
      assert.deepEqual(found.map((s) => s.sandboxId), [odd.sandboxId])
      const paused = await Sandbox.list({ query: { metadata: { listing: tag }, state: ['paused'] } }).nextItems()
      assert.deepEqual(paused, [])
    } finally {
      for (const id of mine) await Sandbox.kill(id)
    }
  },

  async pauseAndConnectKeepProcesses() {
    const sbx = await newSandbox('pause')
    try {
      const pid = (await sbx.commands.run('nohup sleep 1000 >/dev/null 2>&1 & echo $!')).stdout.trim()
      assert.match(pid, /^\d+$/)
      await sbx.commands.run('echo kept > /tmp/state.txt')
      const pause = (typeof sbx.pause === 'function' ? sbx.pause : sbx.betaPause).bind(sbx)
      assert.equal(await pause(), true, 'pausing a running sandbox reports true')
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused')
      const paused = await Sandbox.list({ query: { metadata: { run, purpose: 'pause' }, state: ['paused'] } }).nextItems()
      assert.deepEqual(paused.map((s) => s.sandboxId), [sbx.sandboxId])
      assert.equal(await pause(), false, 'pausing a paused sandbox reports false')

      const resumed = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300_000 })
      assert.equal(resumed.sandboxId, sbx.sandboxId)
      assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'running')
      const r = await resumed.commands.run(`kill -0 ${pid} && echo alive`)
      assert.equal(r.stdout, 'alive\n', 'the process started before the pause survives')
      assert.equal(await resumed.files.read('/tmp/state.txt'), 'kept\n')
      // connect() on a running sandbox just hands it back.
      const again = await sbx.connect()
      assert.equal((await again.commands.run('echo ok')).stdout, 'ok\n')
    } finally {
      await sbx.kill()
    }
  },

  async timeoutPausesAndACommandResumes() {
    // lifecycle onTimeout 'pause': the timeout pauses the sandbox in place instead of killing it, and
    // with autoResume the next command resumes it, with the process started before still alive.
    const lifecycle = { onTimeout: 'pause', autoResume: true }
    const sbx = await newSandbox('autopause', { timeoutMs: 2_000, lifecycle })
    try {
      assert.deepEqual((await sbx.getInfo()).lifecycle, lifecycle)
      const pid = (await sbx.commands.run('nohup sleep 1000 >/dev/null 2>&1 & echo $!')).stdout.trim()
      assert.match(pid, /^\d+$/)
      const state = async () => (await Sandbox.getInfo(sbx.sandboxId)).state
      assert.ok(await until(async () => (await state()) === 'paused', 8_000), 'not paused 8 s after a 2 s timeout')
      await sleep(1_500) // past its deadline and another expiry sweep: kept, still paused
      assert.equal(await state(), 'paused')
      const r = await sbx.commands.run(`kill -0 ${pid} && echo alive`)
      assert.equal(r.stdout, 'alive\n', 'the command resumed the sandbox and its process survived')
      assert.equal(await state(), 'running')
    } finally {
      await sbx.kill()
    }
  },

  async kill() {
    const sbx = await newSandbox('kill')
    assert.equal(await sbx.isRunning(), true)
    assert.equal(await sbx.kill(), true)
    assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a second kill reports false')
    assert.equal(await sbx.isRunning(), false)
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), (e) => {
      assert.ok(e instanceof SandboxNotFoundError || /not found/i.test(`${e}`), `getInfo of a killed sandbox: ${e}`)
      return true
    })
  },

  // A volume shared by two sandboxes at once, written through its own API, outliving both; not
  // destroyed while mounted.
  async volumes() {
    const name = `vol-js-${run}`
    const vol = await Volume.create(name)
    try {
      assert.equal(vol.name, name)
      await vol.makeDir('/seed')
      const entry = await vol.writeFile('/seed/hello.txt', 'from js')
      assert.equal(entry.path, '/seed/hello.txt')
      assert.ok((await Volume.list()).some((v) => v.volumeId === vol.volumeId))
      const info = await Volume.getInfo(vol.volumeId)
      assert.deepEqual([info.volumeId, info.name], [vol.volumeId, name])
      const a = await newSandbox('volume-a', { volumeMounts: { '/data': vol } })
      const b = await newSandbox('volume-b', { volumeMounts: { '/mnt/shared': name } })
      assert.equal((await a.commands.run('cat /data/seed/hello.txt')).stdout, 'from js')
      await a.commands.run('echo from-a > /data/note')
      assert.equal((await b.commands.run('cat /mnt/shared/note')).stdout, 'from-a\n')
      assert.equal(await vol.readFile('/note'), 'from-a\n')
      const names = (await vol.list('/')).map((e) => e.name).sort()
      assert.deepEqual(names, ['note', 'seed'])
      // An entry's stat, and its mode changed through the volume API.
      const st = await vol.getInfo('/note')
      assert.deepEqual([st.name, st.path, st.size, st.type], ['note', '/note', 7, VolumeFileType.FILE])
      assert.ok(st.mtime instanceof Date && !Number.isNaN(st.mtime.getTime()), `mtime ${st.mtime}`)
      assert.equal((await vol.updateMetadata('/note', { mode: 0o600 })).mode & 0o777, 0o600)
      assert.equal((await vol.getInfo('/note')).mode & 0o777, 0o600)
      assert.equal((await vol.getInfo('/seed')).type, VolumeFileType.DIRECTORY)
      assert.equal(await vol.exists('/nothing-here'), false)
      await assert.rejects(Volume.destroy(vol.volumeId), (e) => /mounted/.test(`${e}`))
      await a.kill()
      await b.kill()
      const c = await newSandbox('volume-c', { volumeMounts: { '/data': vol } })
      assert.equal((await c.commands.run('cat /data/note')).stdout, 'from-a\n')
      await c.kill()
    } finally {
      const gone = await until(() => Volume.destroy(vol.volumeId).catch(() => false), 15_000)
      assert.ok(gone, 'the volume could not be destroyed')
    }
    assert.ok(!(await Volume.list()).some((v) => v.volumeId === vol.volumeId))
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
