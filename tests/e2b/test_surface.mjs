// Surface test: every public method of the real, unmodified E2B JS SDK (`e2b`), called against a
// sandboxd daemon, either works (its result asserted) or is refused at once with the SDK's own
// error naming what is not supported and what to use instead. The JS twin of test_surface.py.
//
//   node tests/e2b/test_surface.mjs                    `e2b`                   -> tests/e2b/surface/js.md
//   node tests/e2b/test_surface.mjs code-interpreter   `@e2b/code-interpreter` -> tests/e2b/surface/code-interpreter-js.md
//
// Environment as for test_sdk.mjs (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, E2B_VOLUME_API_URL).
//
// Methods are found by introspection: the static and prototype functions of each class (its own and
// inherited), minus those the SDK's type declarations mark `private` or `protected` (JS has no
// runtime privacy), and the public fields of the instances the run makes (declared `readonly`, not
// private). Classes the SDK does not export (Filesystem, Commands, …) are reached through
// the objects a sandbox hands out. Static methods are `Class.name`, instance methods `Class#name`.
// A method without an entry here fails the run ("new method, classify it"), as does an entry the
// SDK no longer has. Every call runs under a deadline. The table is regenerated and compared with
// the checked-in one: on a difference the run fails and writes `js.md.new` (SURFACE_UPDATE=1
// rewrites the table instead).

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'
import * as e2b from 'e2b'

const { Sandbox, Template, Volume, Secret } = e2b
const MODE = process.argv[2] ?? 'e2b'
const PACKAGE = { e2b: 'e2b', 'code-interpreter': '@e2b/code-interpreter' }[MODE]
if (!PACKAGE) {
  console.error(`unknown mode ${MODE}: e2b or code-interpreter`)
  process.exit(2)
}
const HERE = path.dirname(fileURLToPath(import.meta.url))
const TABLE = path.join(HERE, 'surface', MODE === 'e2b' ? 'js.md' : 'code-interpreter-js.md')
const RUN = randomUUID().slice(0, 10)
const DEADLINE_MS = 30_000
const require = createRequire(import.meta.url)
const SDK_DIR = path.dirname(require.resolve(`${PACKAGE}/package.json`))
const VERSION = JSON.parse(fs.readFileSync(path.join(SDK_DIR, 'package.json'), 'utf8')).version

// The entries of each SDK, in the order they run; `works` and `refused` add to SECTION's.
const ENTRIES = { e2b: new Map(), 'code-interpreter': new Map() }
let SECTION = 'e2b'
function works(name, note, fn, deadline = DEADLINE_MS) {
  assert(!ENTRIES[SECTION].has(name), name)
  ENTRIES[SECTION].set(name, { name, kind: 'works', note, fn, deadline })
}
function refused(name, err, text, note, fn) {
  assert(!ENTRIES[SECTION].has(name), name)
  ENTRIES[SECTION].set(name, { name, kind: 'refused', err, text, note, fn, deadline: DEADLINE_MS })
}

const c = { created: [], cleanups: [] }
async function newSandbox(opts = {}) {
  const sbx = await Sandbox.create({
    ...opts,
    metadata: { suite: 'surface-js', run: RUN, n: randomUUID(), ...(opts.metadata ?? {}) },
  })
  c.created.push(sbx.sandboxId)
  return sbx
}
const UNKNOWN = 'nosuchsandbox0000000'
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
async function rejects(promise, Err, text) {
  try {
    await promise
  } catch (e) {
    assert(e instanceof Err, `${e?.constructor?.name}: ${e?.message}, not ${Err.name}`)
    assert(String(e.message).includes(text), e.message)
    return
  }
  throw new Error(`did not raise ${Err.name}`)
}
async function gone(sbx, pid) {
  const deadline = Date.now() + 5000
  while ((await sbx.commands.list()).some((p) => p.pid === pid)) {
    if (Date.now() > deadline) return false
    await sleep(100)
  }
  return true
}

// --- Sandbox ------------------------------------------------------------------------------------

works('Sandbox.create', 'a sandbox of the default template, running, with its metadata; an unknown template is SandboxError "not found"', async () => {
  await rejects(Sandbox.create(`none-${RUN}`, { metadata: { n: randomUUID() } }), e2b.SandboxError, 'not found')
  c.sbx = await newSandbox({ timeoutMs: 300_000 })
  const info = await c.sbx.getInfo()
  assert.equal(info.metadata.run, RUN)
  assert.equal(info.templateId, 'base')
})
works('Sandbox#sandboxId', 'a non-empty id, the one getInfo names', async () => {
  assert(c.sbx.sandboxId && (await c.sbx.getInfo()).sandboxId === c.sbx.sandboxId)
})
works('Sandbox#sandboxDomain', "the daemon's domain (a string)", async () => {
  assert(typeof c.sbx.sandboxDomain === 'string' && c.sbx.sandboxDomain)
})
works('Sandbox#trafficAccessToken', 'undefined: port traffic is not restricted by default', async () => {
  assert.equal(c.sbx.trafficAccessToken, undefined)
})
works('Sandbox#files', "the sandbox's Filesystem", async () => {
  assert.equal(c.sbx.files.constructor.name, 'Filesystem')
})
works('Sandbox#commands', "the sandbox's Commands", async () => {
  assert.equal(c.sbx.commands.constructor.name, 'Commands')
})
works('Sandbox#pty', "the sandbox's Pty", async () => {
  assert.equal(c.sbx.pty.constructor.name, 'Pty')
})
works('Sandbox#git', "the sandbox's Git", async () => {
  assert(c.sbx.git instanceof e2b.Git)
})
works('Sandbox#isRunning', 'true for the running sandbox', async () => {
  assert.equal(await c.sbx.isRunning(), true)
})
works('Sandbox#getInfo', 'state running, metadata, start before end', async () => {
  const info = await c.sbx.getInfo()
  assert.equal(info.state, 'running')
  assert(info.startedAt < info.endAt)
})
works('Sandbox.getInfo', 'the same sandbox by id; an unknown id is SandboxNotFoundError', async () => {
  assert.equal((await Sandbox.getInfo(c.sbx.sandboxId)).sandboxId, c.sbx.sandboxId)
  await rejects(Sandbox.getInfo('nosuchsandbox0000000'), e2b.SandboxNotFoundError, '')
})
works('Sandbox.getFullInfo', 'the sandbox by id, with its metadata', async () => {
  assert.equal((await Sandbox.getFullInfo(c.sbx.sandboxId)).metadata.run, RUN)
})
works('Sandbox#getMetrics', 'its history: a sample with cpuCount >= 1 and memory used and total, kept, so the'
  + ' next call has it and one newer; a range that ended an hour ago is empty', async () => {
  const m = await c.sbx.getMetrics()
  const last = m[m.length - 1]
  assert(m.length >= 1 && last.cpuCount >= 1 && last.memTotal > 0 && last.memUsed > 0, JSON.stringify(m))
  const later = await c.sbx.getMetrics()
  assert(later.length >= 2, JSON.stringify(later))
  assert.equal(later[later.length - 2].timestamp.getTime(), last.timestamp.getTime())
  assert(later[later.length - 1].timestamp >= later[later.length - 2].timestamp, JSON.stringify(later))
  assert.deepEqual(await c.sbx.getMetrics({ end: new Date(Date.now() - 3600_000) }), [])
})
works('Sandbox.getMetrics', 'the same by id; an unknown id is SandboxNotFoundError', async () => {
  await rejects(Sandbox.getMetrics(UNKNOWN), e2b.SandboxNotFoundError, UNKNOWN)
  assert((await Sandbox.getMetrics(c.sbx.sandboxId)).length >= 1)
})
works('Sandbox#setTimeout', 'endAt moves out, then back in', async () => {
  const before = (await c.sbx.getInfo()).endAt
  await c.sbx.setTimeout(1_200_000)
  const after = (await c.sbx.getInfo()).endAt
  assert(after - before > 600_000, `${before} ${after}`)
  await Sandbox.setTimeout(c.sbx.sandboxId, 300_000)
  assert((await c.sbx.getInfo()).endAt < after)
})
works('Sandbox.setTimeout', 'by id: accepted (the end moving is asserted under Sandbox#setTimeout); an unknown id is SandboxNotFoundError', async () => {
  await rejects(Sandbox.setTimeout(UNKNOWN, 60_000), e2b.SandboxNotFoundError, UNKNOWN)
  await Sandbox.setTimeout(c.sbx.sandboxId, 300_000)
})
works('Sandbox.list', 'a paginator; the metadata filter finds the sandbox', async () => {
  c.sandboxPager = Sandbox.list({ query: { metadata: { run: RUN } }, limit: 1 })
  const items = await c.sandboxPager.nextItems()
  assert.deepEqual(items.map((s) => s.sandboxId), [c.sbx.sandboxId])
})
works('SandboxPaginator#hasNext', 'false after the only page', async () => {
  assert.equal(c.sandboxPager.hasNext, false)
})
works('SandboxPaginator#nextToken', 'undefined after the only page', async () => {
  assert(!c.sandboxPager.nextToken)
})
works('SandboxPaginator#nextItems', 'pages of `limit`, 2 then 1, over three sandboxes', async () => {
  const tag = `page-${RUN}`
  const made = await Promise.all([0, 1, 2].map(() => newSandbox({ metadata: { purpose: tag }, timeoutMs: 60_000 })))
  try {
    const pager = Sandbox.list({ query: { metadata: { purpose: tag } }, limit: 2 })
    const pages = []
    while (pager.hasNext) pages.push(await pager.nextItems())
    assert.deepEqual(pages.map((p) => p.length), [2, 1])
  } finally {
    for (const s of made) await s.kill()
  }
})
works('Sandbox#getHost', '`{port}-{id}.{domain}`', async () => {
  assert(c.sbx.getHost(8000).startsWith(`8000-${c.sbx.sandboxId}.`))
})
const envdHeaders = () => ({ 'E2b-Sandbox-Id': c.sbx.sandboxId, 'E2b-Sandbox-Port': '49983' })
works('Sandbox#downloadUrl', 'a URL that serves the file', async () => {
  await c.sbx.files.write('/home/user/dl.txt', 'download me')
  const r = await fetch(await c.sbx.downloadUrl('/home/user/dl.txt'), { headers: envdHeaders() })
  assert.equal(r.status, 200)
  assert.equal(await r.text(), 'download me')
})
works('Sandbox#uploadUrl', 'a URL that takes a multipart upload; the file is read back', async () => {
  const form = new FormData()
  form.append('file', new Blob(['uploaded']), 'ul.txt')
  const r = await fetch(await c.sbx.uploadUrl('/home/user/ul.txt'), { method: 'POST', body: form, headers: envdHeaders() })
  assert.equal(r.status, 200, await r.text())
  assert.equal(await c.sbx.files.read('/home/user/ul.txt'), 'uploaded')
})
works('Sandbox#getMcpUrl', '`https://{host of port 50005}/mcp`', async () => {
  const url = c.sbx.getMcpUrl()
  assert(url.endsWith('/mcp') && url.includes(c.sbx.sandboxId), url)
})
refused('Sandbox#getMcpToken', e2b.FileNotFoundError, '/etc/mcp-gateway/.token',
  "the SDK reads the gateway's token file, and no MCP gateway runs here: a create with `mcp` is refused with " +
  'SandboxError "mcp servers are not supported"', async () => {
    await rejects(newSandbox({ mcp: { exa: { apiKey: 'x' } } }), e2b.SandboxError, 'mcp servers are not supported')
    await c.sbx.getMcpToken()
  })
const resolver = () => c.sbx.files.read('/etc/resolv.conf')
works('Sandbox#updateNetwork', "a name in `allowOut` makes the sandbox's own forwarder its resolver at once, an " +
  "empty update gives it the host's back", async () => {
  const before = await resolver()
  await c.sbx.updateNetwork({ allowOut: ['example.com'] })
  const during = await resolver()
  assert.ok(during !== before && during.startsWith('nameserver '), during)
  await c.sbx.updateNetwork({})
  assert.equal(await resolver(), before)
})
works('Sandbox.updateNetwork', 'the same by id; `rules` are not added to a sandbox created without secrets or'
  + ' rules (SandboxError)', async () => {
  const before = await resolver()
  await Sandbox.updateNetwork(c.sbx.sandboxId, { allowOut: ['example.com'] })
  assert.notEqual(await resolver(), before)
  await rejects(Sandbox.updateNetwork(c.sbx.sandboxId, { rules: { 'example.com': [{ transform: { headers: { X: 'y' } } }] } }),
    e2b.SandboxError, 'do not pass the egress gateway')
  await Sandbox.updateNetwork(c.sbx.sandboxId, {})
  assert.equal(await resolver(), before)
})
const FORK = 'forks need the gvisor tier'
const FORK_NOTE = 'on the namespace tier; a sandbox created with isolation gvisor forks'
refused('Sandbox#fork', e2b.SandboxError, FORK, FORK_NOTE, () => c.sbx.fork({ count: 1 }))
refused('Sandbox.fork', e2b.SandboxError, FORK, FORK_NOTE, () => Sandbox.fork(c.sbx.sandboxId, { count: 1 }))

// --- Filesystem ---------------------------------------------------------------------------------

works('Filesystem#write', 'an entry naming the path', async () => {
  assert.equal((await c.sbx.files.write('/home/user/s/a.txt', 'alpha')).path, '/home/user/s/a.txt')
})
works('Filesystem#read', 'text, bytes and a relative path (home)', async () => {
  assert.equal(await c.sbx.files.read('/home/user/s/a.txt'), 'alpha')
  assert.equal(Buffer.from(await c.sbx.files.read('/home/user/s/a.txt', { format: 'bytes' })).toString(), 'alpha')
  assert.equal(await c.sbx.files.read('s/a.txt'), 'alpha')
})
works('Filesystem#writeFiles', 'two files in one call, both read back', async () => {
  const out = await c.sbx.files.writeFiles([
    { path: '/home/user/s/b.txt', data: 'beta' },
    { path: '/home/user/s/c.txt', data: 'gamma' },
  ])
  assert.equal(out.length, 2)
  assert.equal(await c.sbx.files.read('/home/user/s/c.txt'), 'gamma')
})
works('Filesystem#list', "names and types of a directory's entries", async () => {
  const kinds = Object.fromEntries((await c.sbx.files.list('/home/user/s')).map((e) => [e.name, e.type]))
  assert.deepEqual(kinds, { 'a.txt': 'file', 'b.txt': 'file', 'c.txt': 'file' })
})
works('Filesystem#exists', 'true for a file, false for a missing one', async () => {
  assert.equal(await c.sbx.files.exists('/home/user/s/a.txt'), true)
  assert.equal(await c.sbx.files.exists('/home/user/s/zz'), false)
})
works('Filesystem#getInfo', 'name, type, size; a missing path is FileNotFoundError', async () => {
  const info = await c.sbx.files.getInfo('/home/user/s/a.txt')
  assert.deepEqual([info.name, info.type, info.size], ['a.txt', 'file', 5])
  await rejects(c.sbx.files.getInfo('/home/user/s/zz'), e2b.FileNotFoundError, '')
})
works('Filesystem#makeDir', 'true when made, false when there', async () => {
  assert.equal(await c.sbx.files.makeDir('/home/user/s/d'), true)
  assert.equal(await c.sbx.files.makeDir('/home/user/s/d'), false)
})
works('Filesystem#rename', 'the new path; the old one is gone', async () => {
  assert.equal((await c.sbx.files.rename('/home/user/s/b.txt', '/home/user/s/d/b.txt')).path, '/home/user/s/d/b.txt')
  assert.equal(await c.sbx.files.exists('/home/user/s/b.txt'), false)
})
works('Filesystem#remove', 'the file is gone', async () => {
  await c.sbx.files.remove('/home/user/s/d/b.txt')
  assert.equal(await c.sbx.files.exists('/home/user/s/d/b.txt'), false)
})
works('Filesystem#watchDir', 'a handle whose callback sees a new file', async () => {
  const events = []
  c.watch = await c.sbx.files.watchDir('/home/user/s/d', (e) => events.push(e))
  await c.sbx.files.write('/home/user/s/d/new.txt', 'x')
  const deadline = Date.now() + 10_000
  while (Date.now() < deadline && !events.some((e) => e.name === 'new.txt')) await sleep(200)
  assert(events.some((e) => e.name === 'new.txt'), JSON.stringify(events))
})
works('WatchHandle#stop', 'returns', async () => {
  await c.watch.stop()
})

// --- Commands -----------------------------------------------------------------------------------

works('Commands#run', 'stdout, stderr, exit code, envs, cwd, user; a non-zero exit is CommandExitError', async () => {
  const r = await c.sbx.commands.run('echo out; echo err >&2; echo $X; pwd', { envs: { X: 'x' }, cwd: '/tmp' })
  assert.deepEqual([r.exitCode, r.stdout, r.stderr], [0, 'out\nx\n/tmp\n', 'err\n'])
  assert.equal((await c.sbx.commands.run('whoami', { user: 'root' })).stdout, 'root\n')
  await rejects(c.sbx.commands.run('exit 3'), e2b.CommandExitError, '')
})
works('Commands#list', "a background command's pid is listed", async () => {
  c.bg = await c.sbx.commands.run('sleep 3; echo done-later', { background: true })
  assert((await c.sbx.commands.list()).some((p) => p.pid === c.bg.pid))
})
works('CommandHandle#pid', 'a positive number', async () => {
  assert(Number.isInteger(c.bg.pid) && c.bg.pid > 0)
})
works('CommandHandle#disconnect', 'returns; the command runs on (Commands#connect then waits for it)', async () => {
  await c.bg.disconnect()
})
works('Commands#connect', 'a handle on the running command; wait() gets its output', async () => {
  const again = await c.sbx.commands.connect(c.bg.pid)
  assert((await again.wait()).stdout.includes('done-later'))
})
works('CommandHandle#wait', 'the result (exit code and output)', async () => {
  const r = await (await c.sbx.commands.run('echo waited', { background: true })).wait()
  assert.deepEqual([r.exitCode, r.stdout], [0, 'waited\n'])
})
works('CommandHandle#stdout', 'the output so far', async () => {
  const h = await c.sbx.commands.run('echo so-far', { background: true })
  await h.wait()
  assert.equal(h.stdout, 'so-far\n')
})
works('CommandHandle#stderr', 'the error output so far', async () => {
  const h = await c.sbx.commands.run('echo e >&2', { background: true })
  await h.wait()
  assert.equal(h.stderr, 'e\n')
})
works('CommandHandle#exitCode', 'the exit code once it ended', async () => {
  const h = await c.sbx.commands.run('true', { background: true })
  await h.wait()
  assert.equal(h.exitCode, 0)
})
works('CommandHandle#error', 'undefined for a command that succeeded', async () => {
  const h = await c.sbx.commands.run('true', { background: true })
  await h.wait()
  assert.equal(h.error, undefined)
})
works('Commands#sendStdin', 'a line reaches `head -n 1`', async () => {
  const h = await c.sbx.commands.run('head -n 1', { background: true, stdin: true })
  await c.sbx.commands.sendStdin(h.pid, 'typed\n')
  assert.equal((await h.wait()).stdout, 'typed\n')
})
works('Commands#closeStdin', '`cat` sees EOF and exits 0', async () => {
  const h = await c.sbx.commands.run('cat', { background: true, stdin: true })
  await c.sbx.commands.sendStdin(h.pid, 'x\n')
  await c.sbx.commands.closeStdin(h.pid)
  assert.equal((await h.wait()).stdout, 'x\n')
})
works('Commands#supportsStdinClose', 'true (the daemon claims an envd that closes stdin)', async () => {
  assert.equal(c.sbx.commands.supportsStdinClose, true)
})
works('CommandHandle#sendStdin', 'a line reaches the process', async () => {
  const h = await c.sbx.commands.run('head -n 1', { background: true, stdin: true })
  await h.sendStdin('via-handle\n')
  assert.equal((await h.wait()).stdout, 'via-handle\n')
})
works('CommandHandle#closeStdin', '`cat` sees EOF and exits', async () => {
  const h = await c.sbx.commands.run('cat', { background: true, stdin: true })
  await h.closeStdin()
  assert.equal((await h.wait()).exitCode, 0)
})
works('Commands#kill', 'true for a running command; false for an unknown pid', async () => {
  const h = await c.sbx.commands.run('sleep 100', { background: true })
  assert.equal(await c.sbx.commands.kill(h.pid), true)
  assert(await gone(c.sbx, h.pid))
  assert.equal(await c.sbx.commands.kill(999999), false)
})
works('CommandHandle#kill', 'true; the command ends', async () => {
  const h = await c.sbx.commands.run('sleep 100', { background: true })
  assert.equal(await h.kill(), true)
  assert(await gone(c.sbx, h.pid))
})

// --- Pty ----------------------------------------------------------------------------------------

works('Pty#create', "a handle with a pid; its output callback gets the shell's output (read under Pty#sendInput)", async () => {
  const out = []
  c.pty = await c.sbx.pty.create({ rows: 24, cols: 80, onData: (d) => out.push(Buffer.from(d)) })
  c.ptyOut = out
  assert(c.pty.pid > 0)
})
works('Pty#resize', '`stty size` in the pty then reports the new size (read under Pty#sendInput)', async () => {
  await c.sbx.pty.resize(c.pty.pid, { rows: 30, cols: 100 })
})
works('Pty#sendInput', 'the shell runs what is typed: its output holds the command\'s and the resized size', async () => {
  await c.sbx.pty.sendInput(c.pty.pid, new TextEncoder().encode('stty size; echo pty-$((40+2)); exit\n'))
  await c.pty.wait().catch(() => {})
  const text = Buffer.concat(c.ptyOut).toString()
  assert(text.includes('pty-42') && text.includes('30 100'), text)
})
works('Pty#connect', 'a handle on a running pty', async () => {
  const h = await c.sbx.pty.create({ rows: 24, cols: 80, onData: () => {} })
  await h.disconnect()
  const again = await c.sbx.pty.connect(h.pid, { onData: () => {} })
  assert.equal(again.pid, h.pid)
  c.pty2 = h
})
works('Pty#kill', 'true; it is no longer listed', async () => {
  assert.equal(await c.sbx.pty.kill(c.pty2.pid), true)
  assert(await gone(c.sbx, c.pty2.pid))
})

// --- Git ----------------------------------------------------------------------------------------

const REPO = '/home/user/repo'
works('Git#init', 'a repository on branch main', async () => {
  await c.sbx.git.init(REPO, { initialBranch: 'main' })
  assert(await c.sbx.files.exists(`${REPO}/.git`))
})
works('Git#configureUser', 'user.name set (global)', async () => {
  await c.sbx.git.configureUser('Surface', 'surface@example.com')
  assert.equal(await c.sbx.git.getConfig('user.name'), 'Surface')
})
works('Git#setConfig', 'a repository-scoped value (read back under Git#getConfig)', async () => {
  await c.sbx.git.setConfig('core.surface', 'yes', { scope: 'local', path: REPO })
})
works('Git#getConfig', 'the value set; undefined for an unset key', async () => {
  assert.equal(await c.sbx.git.getConfig('core.surface', { scope: 'local', path: REPO }), 'yes')
  assert(!(await c.sbx.git.getConfig('core.nosuchkey', { scope: 'local', path: REPO })))
})
works('Git#status', 'an untracked file is reported', async () => {
  await c.sbx.files.write(`${REPO}/one.txt`, '1\n')
  const st = await c.sbx.git.status(REPO)
  assert(st.fileStatus.some((f) => f.name === 'one.txt'), JSON.stringify(st))
})
works('Git#add', 'the file is staged', async () => {
  await c.sbx.git.add(REPO)
  assert((await c.sbx.git.status(REPO)).fileStatus.some((f) => f.staged))
})
works('Git#commit', 'a commit; the tree is clean after', async () => {
  await c.sbx.git.commit(REPO, 'first')
  assert((await c.sbx.git.status(REPO)).isClean)
})
works('Git#createBranch', 'a new branch, checked out', async () => {
  await c.sbx.git.createBranch(REPO, 'feature')
  assert.equal((await c.sbx.git.branches(REPO)).currentBranch, 'feature')
})
works('Git#checkoutBranch', 'back on main', async () => {
  await c.sbx.git.checkoutBranch(REPO, 'main')
  assert.equal((await c.sbx.git.branches(REPO)).currentBranch, 'main')
})
works('Git#branches', 'the local branches and the current one', async () => {
  const b = await c.sbx.git.branches(REPO)
  assert(b.branches.includes('feature') && b.currentBranch === 'main', JSON.stringify(b))
})
works('Git#deleteBranch', 'the branch is gone', async () => {
  await c.sbx.git.deleteBranch(REPO, 'feature')
  assert(!(await c.sbx.git.branches(REPO)).branches.includes('feature'))
})
works('Git#remoteAdd', 'a remote (a bare repository in the sandbox; read back under Git#remoteGet)', async () => {
  await c.sbx.commands.run('git init -q --bare /home/user/remote.git')
  await c.sbx.git.remoteAdd(REPO, 'origin', '/home/user/remote.git')
})
works('Git#remoteGet', "the remote's URL; undefined for an unknown one", async () => {
  assert.equal(await c.sbx.git.remoteGet(REPO, 'origin'), '/home/user/remote.git')
  assert(!(await c.sbx.git.remoteGet(REPO, 'nope')))
})
works('Git#push', 'main reaches the remote', async () => {
  await c.sbx.git.push(REPO, { remote: 'origin', branch: 'main' })
  assert((await c.sbx.commands.run('git --git-dir=/home/user/remote.git log --oneline main')).stdout.includes('first'))
})
works('Git#clone', 'a clone of the remote holds the committed file', async () => {
  await c.sbx.git.clone('/home/user/remote.git', { path: '/home/user/clone', branch: 'main' })
  assert.equal(await c.sbx.files.read('/home/user/clone/one.txt'), '1\n')
})
works('Git#pull', 'a commit pushed from the clone arrives', async () => {
  await c.sbx.files.write('/home/user/clone/two.txt', '2\n')
  await c.sbx.git.add('/home/user/clone')
  await c.sbx.git.commit('/home/user/clone', 'second')
  await c.sbx.git.push('/home/user/clone')
  await c.sbx.git.pull(REPO, { remote: 'origin', branch: 'main' })
  assert.equal(await c.sbx.files.read(`${REPO}/two.txt`), '2\n')
})
works('Git#restore', 'a modified file is restored', async () => {
  await c.sbx.files.write(`${REPO}/one.txt`, 'changed\n')
  await c.sbx.git.restore(REPO, { paths: ['one.txt'] })
  assert.equal(await c.sbx.files.read(`${REPO}/one.txt`), '1\n')
})
works('Git#reset', "a hard reset to HEAD~1 drops the last commit's file", async () => {
  await c.sbx.git.reset(REPO, { mode: 'hard', target: 'HEAD~1' })
  assert.equal(await c.sbx.files.exists(`${REPO}/two.txt`), false)
})
works('Git#dangerouslyAuthenticate', 'a credential helper in the global config', async () => {
  await c.sbx.git.dangerouslyAuthenticate({ username: 'someone', password: 'not-a-real-token', host: 'git.example.com' })
  assert(await c.sbx.git.getConfig('credential.helper'))
})

// --- Snapshots, pause, connect ------------------------------------------------------------------

works('Sandbox#createSnapshot', 'a snapshot id; a sandbox created from it has the file', async () => {
  await c.sbx.files.write('/home/user/snap.txt', 'snapped')
  c.snapshot = await c.sbx.createSnapshot()
  const s2 = await Sandbox.create(c.snapshot.snapshotId, { metadata: { run: RUN, n: randomUUID() } })
  c.created.push(s2.sandboxId)
  try {
    assert.equal(await s2.files.read('/home/user/snap.txt'), 'snapped')
  } finally {
    await s2.kill()
  }
}, 90_000)
works('Sandbox.createSnapshot', 'a second snapshot, by sandbox id; an unknown id is SandboxNotFoundError', async () => {
  await rejects(Sandbox.createSnapshot(UNKNOWN), e2b.SandboxNotFoundError, UNKNOWN)
  c.snapshot2 = await Sandbox.createSnapshot(c.sbx.sandboxId)
  assert(c.snapshot2.snapshotId)
}, 90_000)
works('Sandbox#listSnapshots', "a paginator listing the sandbox's snapshots", async () => {
  c.snapshotPager = c.sbx.listSnapshots()
  const ids = (await c.snapshotPager.nextItems()).map((s) => s.snapshotId)
  assert(ids.includes(c.snapshot.snapshotId) && ids.includes(c.snapshot2.snapshotId), ids)
})
works('Sandbox.listSnapshots', 'lists them too', async () => {
  const ids = (await Sandbox.listSnapshots({ sandboxId: c.sbx.sandboxId }).nextItems()).map((s) => s.snapshotId)
  assert(ids.includes(c.snapshot.snapshotId), ids)
})
works('SnapshotPaginator#nextItems', 'pages of one', async () => {
  const pager = c.sbx.listSnapshots({ limit: 1 })
  const ids = []
  while (pager.hasNext) ids.push(...(await pager.nextItems()).map((s) => s.snapshotId))
  assert.equal(ids.length, 2, ids)
})
works('SnapshotPaginator#hasNext', 'false after the only page', async () => {
  assert.equal(c.snapshotPager.hasNext, false)
})
works('SnapshotPaginator#nextToken', 'undefined after the only page', async () => {
  assert(!c.snapshotPager.nextToken)
})
works('Sandbox.deleteSnapshot', 'true, then false for the deleted id', async () => {
  for (const s of [c.snapshot, c.snapshot2]) {
    assert.equal(await Sandbox.deleteSnapshot(s.snapshotId), true)
    assert.equal(await Sandbox.deleteSnapshot(s.snapshotId), false)
  }
})
works('Sandbox#pause', 'true; the sandbox is listed paused', async () => {
  await c.sbx.commands.run('echo kept > /tmp/state.txt')
  assert.equal(await c.sbx.pause(), true)
  assert.equal((await Sandbox.getInfo(c.sbx.sandboxId)).state, 'paused')
}, 60_000)
works('Sandbox#betaPause', 'false on a sandbox already paused', async () => {
  assert.equal(await c.sbx.betaPause(), false)
})
works('Sandbox.pause', 'false by id on a paused sandbox', async () => {
  assert.equal(await Sandbox.pause(c.sbx.sandboxId), false)
})
works('Sandbox.betaPause', 'false by id on a paused sandbox', async () => {
  assert.equal(await Sandbox.betaPause(c.sbx.sandboxId), false)
})
works('Sandbox.connect', 'resumes the paused sandbox; its /tmp is kept; an unknown id is SandboxNotFoundError', async () => {
  await rejects(Sandbox.connect('nosuchsandbox0000000'), e2b.SandboxNotFoundError, '')
  const again = await Sandbox.connect(c.sbx.sandboxId, { timeoutMs: 300_000 })
  assert.equal((await Sandbox.getInfo(c.sbx.sandboxId)).state, 'running')
  assert.equal(await again.files.read('/tmp/state.txt'), 'kept\n')
}, 60_000)
works('Sandbox#connect', 'on a running sandbox, hands it back', async () => {
  const again = await c.sbx.connect()
  assert.equal((await again.commands.run('echo ok')).stdout, 'ok\n')
})

// --- Templates ----------------------------------------------------------------------------------

const CONTEXT = fs.mkdtempSync(path.join(os.tmpdir(), 'surface-ctx-'))
fs.writeFileSync(path.join(CONTEXT, 'f.txt'), 'from the context\n')
async function steps(t) {
  const out = await Template.toJSON(t, false)
  return JSON.parse(out)
}
const builder = () => Template({ fileContextPath: CONTEXT }).fromTemplate('base')
const last = (j) => j.steps[j.steps.length - 1]

works('TemplateBase#fromTemplate', 'fromTemplate in the JSON', async () => {
  assert.equal((await steps(Template().fromTemplate('base'))).fromTemplate, 'base')
})
for (const [m, prefix] of [
  ['fromBaseImage', 'e2bdev/base'], ['fromDebianImage', 'debian'], ['fromUbuntuImage', 'ubuntu'],
  ['fromPythonImage', 'python'], ['fromNodeImage', 'node'], ['fromBunImage', 'oven/bun'],
  ['fromAlpineImage', 'alpine'], ['fromFedoraImage', 'fedora'], ['fromArchImage', 'archlinux'],
]) {
  works(`TemplateBase#${m}`, `fromImage \`${prefix}…\` in the JSON (built from a registry)`, async () => {
    const j = await steps(Template()[m]())
    assert(j.fromImage.startsWith(prefix), JSON.stringify(j))
  })
}
works('TemplateBase#fromImage', 'fromImage and registry credentials in the JSON', async () => {
  const j = await steps(Template().fromImage('reg.example.com/app:v1', { username: 'u', password: 'p' }))
  assert(j.fromImage === 'reg.example.com/app:v1' && j.fromImageRegistry.username === 'u', JSON.stringify(j))
})
works('TemplateBase#fromAWSRegistry', 'an aws registry entry in the JSON', async () => {
  const j = await steps(Template().fromAWSRegistry('1.dkr.ecr.eu-west-1.amazonaws.com/app:v1',
    { accessKeyId: 'a', secretAccessKey: 's', region: 'eu-west-1' }))
  assert.equal(j.fromImageRegistry.type, 'aws')
})
works('TemplateBase#fromGCPRegistry', 'a gcp registry entry in the JSON', async () => {
  const j = await steps(Template().fromGCPRegistry('eu.gcr.io/p/app:v1', { serviceAccountJSON: { k: 'v' } }))
  assert.equal(j.fromImageRegistry.type, 'gcp')
})
works('TemplateBase#fromDockerfile', 'FROM/RUN/CMD parsed into steps and a start command', async () => {
  const j = await steps(Template().fromDockerfile('FROM alpine:3\nRUN echo hi\nENV A=1\nCMD sleep 1\n'))
  assert(j.fromImage === 'alpine:3' && j.startCmd === 'sleep 1', JSON.stringify(j))
})
works('TemplateBase#skipCache', 'force set in the JSON', async () => {
  assert.equal((await steps(Template().skipCache().fromTemplate('base'))).force, true)
})
works('Template.toJSON', "the template's JSON, with its steps", async () => {
  assert.equal(last(await steps(builder().runCmd('true'))).type, 'RUN')
})
works('Template.toDockerfile', 'FROM and RUN lines', async () => {
  const text = Template.toDockerfile(Template().fromImage('alpine:3').runCmd('echo hi'))
  assert(text.includes('FROM alpine:3') && text.includes('RUN echo hi'), text)
})
for (const [m, call, check, note] of [
  ['aptInstall', (b) => b.aptInstall(['curl']), (j) => last(j).args[0].includes('apt-get'), 'a RUN step with apt-get, as root'],
  ['pipInstall', (b) => b.pipInstall('requests'), (j) => last(j).args[0].includes('pip'), 'a RUN step with pip'],
  ['npmInstall', (b) => b.npmInstall('left-pad'), (j) => last(j).args[0].includes('npm'), 'a RUN step with npm'],
  ['bunInstall', (b) => b.bunInstall('left-pad'), (j) => last(j).args[0].includes('bun'), 'a RUN step with bun'],
  ['runCmd', (b) => b.runCmd('echo hi', { user: 'root' }), (j) => last(j).args.join(' ') === 'echo hi root', 'a RUN step [cmd, user]'],
  ['setEnvs', (b) => b.setEnvs({ A: '1' }), (j) => last(j).type === 'ENV', 'an ENV step'],
  ['setUser', (b) => b.setUser('root'), (j) => last(j).type === 'USER', 'a USER step'],
  ['setWorkdir', (b) => b.setWorkdir('/srv'), (j) => last(j).type === 'WORKDIR', 'a WORKDIR step'],
  ['copy', (b) => b.copy('f.txt', '/srv/f.txt'), (j) => last(j).type === 'COPY' && last(j).args[1] === '/srv/f.txt', 'a COPY step [src, dest, user, mode]'],
  ['copyItems', (b) => b.copyItems([{ src: 'f.txt', dest: '/srv/g.txt' }]), (j) => last(j).type === 'COPY', 'a COPY step per item'],
  ['makeDir', (b) => b.makeDir('/srv/d'), (j) => last(j).args[0].includes('mkdir'), 'a RUN step with mkdir'],
  ['makeSymlink', (b) => b.makeSymlink('/a', '/b'), (j) => last(j).args[0].includes('ln -s'), 'a RUN step with ln -s'],
  ['remove', (b) => b.remove('/srv/x'), (j) => last(j).args[0].includes('rm'), 'a RUN step with rm'],
  ['rename', (b) => b.rename('/a', '/b'), (j) => last(j).args[0].includes('mv'), 'a RUN step with mv'],
  ['gitClone', (b) => b.gitClone('https://example.com/r.git', '/srv/r'), (j) => last(j).args[0].includes('git clone'), 'a RUN step with git clone'],
  ['addMcpServer', () => Template().fromTemplate('mcp-gateway').addMcpServer('exa'), (j) => last(j).args[0].includes('mcp'),
    'on `fromTemplate("mcp-gateway")`: a RUN step adding the server (client side; sandboxd has no mcp-gateway template)'],
  ['setStartCmd', (b) => b.setStartCmd('sleep 1', 'true'), (j) => j.startCmd === 'sleep 1', 'startCmd and readyCmd'],
  ['setReadyCmd', (b) => b.setReadyCmd('true'), (j) => j.readyCmd === 'true', 'readyCmd'],
  ['betaDevContainerPrebuild', () => Template().fromTemplate('devcontainer').betaDevContainerPrebuild('/srv/.devcontainer'),
    (j) => last(j).args[0].includes('devcontainer'), 'on `fromTemplate("devcontainer")`: a RUN step with the devcontainer CLI (client side)'],
  ['betaSetDevContainerStart', () => Template().fromTemplate('devcontainer').betaSetDevContainerStart('/srv/.devcontainer'),
    (j) => j.startCmd.includes('devcontainer'), 'on `fromTemplate("devcontainer")`: a devcontainer start command (client side)'],
]) {
  works(`TemplateBase#${m}`, note, async () => {
    const j = await steps(call(builder()))
    assert(check(j), JSON.stringify(j))
  })
}
works('Template.build', "a small template is built; a sandbox from it sees the RUN step's file", async () => {
  c.alias = `surface-js-${RUN}`
  const info = await Template.build(builder().copy('f.txt', '/home/user/f.txt').runCmd('echo built > /home/user/built.txt'), c.alias)
  c.cleanups.push(() => Sandbox.deleteSnapshot(c.alias))
  assert.equal(info.templateId, c.alias)
  const s = await Sandbox.create(c.alias, { metadata: { run: RUN, n: randomUUID() } })
  c.created.push(s.sandboxId)
  try {
    assert.equal(await s.files.read('/home/user/built.txt'), 'built\n')
    assert.equal(await s.files.read('/home/user/f.txt'), 'from the context\n')
  } finally {
    await s.kill()
  }
}, 120_000)
works('Template.exists', 'true for the built name, false for another', async () => {
  assert.equal(await Template.exists(c.alias), true)
  assert.equal(await Template.exists(`none-${RUN}`), false)
})
works('Template.aliasExists', 'as exists', async () => {
  assert.equal(await Template.aliasExists(c.alias), true)
  assert.equal(await Template.aliasExists(`none-${RUN}`), false)
})
works('Template.buildInBackground', 'a build with ids, under way', async () => {
  c.bgAlias = `surface-js-bg-${RUN}`
  c.bgBuild = await Template.buildInBackground(builder().runCmd('true'), c.bgAlias)
  assert(c.bgBuild.templateId && c.bgBuild.buildId, JSON.stringify(c.bgBuild))
}, 60_000)
works('Template.getBuildStatus', 'reaches ready; an unknown build is BuildError "not found"', async () => {
  await rejects(Template.getBuildStatus({ templateId: `none-${RUN}`, buildId: 'none' }), e2b.BuildError, 'not found')
  const deadline = Date.now() + 110_000
  let st
  for (;;) {
    st = await Template.getBuildStatus(c.bgBuild)
    if (st.status === 'ready' || st.status === 'error' || Date.now() > deadline) break
    await sleep(500)
  }
  assert.equal(st.status, 'ready', JSON.stringify(st))
  assert.equal(await Sandbox.deleteSnapshot(c.bgAlias), true)
}, 120_000)
const TAGS = 'template tags are not supported'
refused('Template.assignTags', e2b.TemplateError, TAGS, '', () => Template.assignTags(c.alias, ['v2']))
refused('Template.removeTags', e2b.TemplateError, TAGS, '', () => Template.removeTags(c.alias, ['v2']))
refused('Template.getTags', e2b.TemplateError, TAGS, '', () => Template.getTags(c.alias))

// --- Volumes ------------------------------------------------------------------------------------

works('Volume.create', 'a volume with the given name and an id', async () => {
  c.vol = await Volume.create(`surface-js-${RUN}`)
  assert(c.vol.name === `surface-js-${RUN}` && c.vol.volumeId)
})
works('Volume#name', 'the name given', async () => {
  assert.equal(c.vol.name, `surface-js-${RUN}`)
})
works('Volume#volumeId', 'a non-empty id', async () => {
  assert(c.vol.volumeId)
})
works('Volume#token', 'a non-empty token for the content API', async () => {
  assert(c.vol.token)
})
works('Volume#domain', "the SDK's default domain, unused: the content API is E2B_VOLUME_API_URL", async () => {
  assert.equal(c.vol.domain, 'e2b.app')
})
works('Volume#debug', 'unset or false', async () => {
  assert(!c.vol.debug)
})
works('Volume#proxy', 'unset', async () => {
  assert(!c.vol.proxy)
})
works('Volume.connect', 'the same volume by id; an unknown id is VolumeNotFoundError', async () => {
  await rejects(Volume.connect(`none-${RUN}`), e2b.VolumeNotFoundError, 'not found')
  assert.equal((await Volume.connect(c.vol.volumeId)).name, c.vol.name)
})
works('Volume.list', 'lists the volume', async () => {
  assert((await Volume.list()).some((v) => v.volumeId === c.vol.volumeId))
})
works('Volume.getInfo', "the volume's name by id; an unknown id is VolumeNotFoundError", async () => {
  await rejects(Volume.getInfo(`none-${RUN}`), e2b.VolumeNotFoundError, 'not found')
  assert.equal((await Volume.getInfo(c.vol.volumeId)).name, c.vol.name)
})
works('Volume#makeDir', 'a directory entry', async () => {
  assert.equal((await c.vol.makeDir('/d')).type, 'directory')
})
works('Volume#writeFile', 'an entry with the size written', async () => {
  assert.equal((await c.vol.writeFile('/d/f.txt', 'vol')).size, 3)
})
works('Volume#readFile', 'the bytes written', async () => {
  assert.equal(await c.vol.readFile('/d/f.txt'), 'vol')
})
works('Volume#exists', 'true, then false for a missing path', async () => {
  assert.equal(await c.vol.exists('/d/f.txt'), true)
  assert.equal(await c.vol.exists('/d/none'), false)
})
works('Volume#getInfo', "an entry's stat", async () => {
  const st = await c.vol.getInfo('/d/f.txt')
  assert.deepEqual([st.name, st.size, st.type], ['f.txt', 3, 'file'])
})
works('Volume#list', "a directory's entries", async () => {
  assert.deepEqual((await c.vol.list('/d')).map((e) => e.name), ['f.txt'])
})
works('Volume#updateMetadata', 'the mode changed', async () => {
  assert.equal((await c.vol.updateMetadata('/d/f.txt', { mode: 0o600 })).mode & 0o777, 0o600)
})
works('Volume#remove', 'the file is gone', async () => {
  await c.vol.remove('/d/f.txt')
  assert.equal(await c.vol.exists('/d/f.txt'), false)
})
works('Volume.destroy', 'true; no longer listed; false for an unknown id', async () => {
  assert.equal(await Volume.destroy(c.vol.volumeId), true)
  assert.equal(await Volume.destroy(c.vol.volumeId), false)
  assert(!(await Volume.list()).some((v) => v.volumeId === c.vol.volumeId))
})

// --- Secrets ------------------------------------------------------------------------------------

works('Secret.create', 'version 1, the value never echoed', async () => {
  c.secret = `surface-js-${RUN}`
  const info = await Secret.create(c.secret, 'sk-value-1')
  assert(info.version === 1 && !JSON.stringify(info).includes('sk-value-1'))
})
works('Secret.getInfo', 'found by name and by id; an unknown name is SecretNotFoundError', async () => {
  await rejects(Secret.getInfo(`none-${RUN}`), e2b.SecretNotFoundError, 'not found')
  const info = await Secret.getInfo(c.secret)
  assert.equal((await Secret.getInfo(info.secretId)).name, c.secret)
})
works('Secret.exists', 'true, then false for another name', async () => {
  assert.equal(await Secret.exists(c.secret), true)
  assert.equal(await Secret.exists(`none-${RUN}`), false)
})
works('Secret.update', 'version 2; an unknown name is SecretNotFoundError', async () => {
  await rejects(Secret.update(`none-${RUN}`, 'v'), e2b.SecretNotFoundError, 'not found')
  assert.equal((await Secret.update(c.secret, 'sk-value-2')).version, 2)
})
works('Secret.list', 'a paginator listing the secret', async () => {
  c.secretPager = Secret.list({ limit: 100 })
  assert((await c.secretPager.nextItems()).some((s) => s.name === c.secret))
})
works('SecretPaginator#nextItems', 'pages of one, each name once', async () => {
  const pager = Secret.list({ limit: 1 })
  const names = []
  while (pager.hasNext) names.push(...(await pager.nextItems()).map((s) => s.name))
  assert(names.includes(c.secret) && names.length === new Set(names).size, names)
})
works('SecretPaginator#hasNext', 'false after the only page', async () => {
  assert.equal(c.secretPager.hasNext, false)
})
works('SecretPaginator#nextToken', 'undefined after the only page', async () => {
  assert(!c.secretPager.nextToken)
})
works('Secret.fill', 'a placeholder naming the secret (client side)', async () => {
  assert(String(Secret.fill(c.secret)).includes(c.secret))
})
works('Secret.iamToken', 'a token definition (client side); a create using one is SandboxError "workload identity (iam) is not supported"', async () => {
  const t = Secret.iamToken({ audience: 'sts.example.com', tokenType: 'JWT-SVID' })
  assert(t)
  await rejects(newSandbox({ iam: { tokens: { aws: t } } }), e2b.SandboxError, 'workload identity (iam) is not supported')
})
works('Secret.destroy', 'true, then false', async () => {
  assert.equal(await Secret.destroy(c.secret), true)
  assert.equal(await Secret.destroy(c.secret), false)
})

// --- Last: kill ---------------------------------------------------------------------------------

works('Sandbox#kill', 'true; getInfo is then SandboxNotFoundError', async () => {
  assert.equal(await c.sbx.kill(), true)
  await rejects(Sandbox.getInfo(c.sbx.sandboxId), e2b.SandboxNotFoundError, '')
})
works('Sandbox.kill', 'false for a killed sandbox', async () => {
  assert.equal(await Sandbox.kill(c.sbx.sandboxId), false)
})

// --- The code interpreter SDK: what its Sandbox adds, and its result classes --------------------

SECTION = 'code-interpreter'
const CI = await import('@e2b/code-interpreter')

works('Sandbox#runCode', "on a sandbox of the default template (code-interpreter-v1): state kept between calls, the " +
  "main result's text, stdout and an error with its name; an unknown language is SandboxError `400 Bad Request` " +
  '(this SDK shows the body, naming the language unsupported, only with its diagnostics on)', async () => {
  c.sbx = await CI.Sandbox.create({ metadata: { suite: 'surface-js-ci', run: RUN, n: randomUUID() }, timeoutMs: 300_000 })
  c.created.push(c.sbx.sandboxId)
  assert.equal((await c.sbx.getInfo()).templateId, 'code-interpreter-v1')
  assert.equal((await c.sbx.runCode('x = 20 + 1\nx')).text, '21')
  c.execution = await c.sbx.runCode("print('out')\nx * 2")
  assert.equal(c.execution.text, '42')
  assert.deepEqual(c.execution.logs.stdout, ['out\n'])
  c.failed = await c.sbx.runCode('1/0')
  assert.equal(c.failed.error.name, 'ZeroDivisionError')
  await rejects(c.sbx.runCode('1', { language: 'cobol' }), e2b.SandboxError, '400 Bad Request')
}, 120_000)
works('Execution#text', "the main result's text", async () => {
  assert.equal(c.execution.text, '42')
})
works('Execution#toJSON', 'the results and logs', async () => {
  const j = c.execution.toJSON()
  assert.deepEqual(j.logs.stdout, ['out\n'])
  assert.equal(j.results[0].text, '42')
})
works('Result#formats', 'none beyond text for a number; png for a plot', async () => {
  assert.deepEqual(c.execution.results[0].formats(), [])
  const plot = await c.sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()')
  assert(plot.results.some((r) => r.formats().includes('png')))
})
works('Result#toJSON', 'the text of the result', async () => {
  assert.equal(c.execution.results[0].toJSON().text, '42')
})
works('Sandbox#createCodeContext', 'a context with its own state, language and cwd', async () => {
  c.context = await c.sbx.createCodeContext({ cwd: '/tmp' })
  assert(c.context.id && c.context.language === 'python' && c.context.cwd === '/tmp', JSON.stringify(c.context))
  await c.sbx.runCode('y = 5', { context: c.context })
  assert.equal((await c.sbx.runCode('y', { context: c.context })).text, '5')
})
works('Sandbox#listCodeContexts', 'the created context is listed', async () => {
  assert((await c.sbx.listCodeContexts()).some((x) => x.id === c.context.id))
})
works('Sandbox#restartCodeContext', "the context's state is gone after a restart", async () => {
  await c.sbx.restartCodeContext(c.context)
  assert.equal((await c.sbx.runCode('y', { context: c.context })).error?.name, 'NameError')
}, 60_000)
works('Sandbox#removeCodeContext', 'no longer listed; running code in it is NotFoundError', async () => {
  await c.sbx.removeCodeContext(c.context.id)
  assert(!(await c.sbx.listCodeContexts()).some((x) => x.id === c.context.id))
  await rejects(c.sbx.runCode('1', { context: c.context }), e2b.NotFoundError, '')
  await c.sbx.kill()
})

// --- Introspection ------------------------------------------------------------------------------

/** `{className: {static: Set, proto: Set}}` of what the type declarations mark private or protected. */
function hiddenByDeclarations() {
  const dts = fs.readFileSync(path.join(SDK_DIR, 'dist', 'index.d.ts'), 'utf8').split('\n')
  const hidden = {}
  let current = null
  for (const line of dts) {
    const start = line.match(/^declare (?:abstract )?class (\w+)/)
    if (start) {
      current = hidden[start[1]] = { static: new Set(), proto: new Set() }
      continue
    }
    if (line.startsWith('}')) {
      current = null
      continue
    }
    const m = current && line.match(/^\s+(?:private|protected)\s+(static\s+)?(?:readonly\s+)?(?:get\s+)?(\w+)/)
    if (m) current[m[1] ? 'static' : 'proto'].add(m[2])
  }
  return hidden
}

function methods(obj, side, hidden, own = false) {
  const found = new Set()
  const end = (o) => !o || o === Object.prototype || o === Function.prototype || (own && o !== obj)
  for (let o = obj; !end(o); o = Object.getPrototypeOf(o)) {
    const owner = side === 'static' ? o.name : o.constructor?.name
    const skip = hidden[owner]?.[side] ?? new Set()
    for (const name of Object.getOwnPropertyNames(o)) {
      if (name.startsWith('_') || ['constructor', 'prototype', 'length', 'name', 'caller', 'arguments'].includes(name)) continue
      if (skip.has(name)) continue
      found.add(name)
    }
  }
  // A name hidden anywhere in the chain (declared private in a subclass) stays hidden.
  for (let o = obj; !end(o); o = Object.getPrototypeOf(o)) {
    const owner = side === 'static' ? o.name : o.constructor?.name
    for (const name of hidden[owner]?.[side] ?? []) found.delete(name)
  }
  return found
}

/** The public fields an instance carries (JS fields live on the object, not its prototype). */
function fields(instance, hidden) {
  const skip = new Set()
  for (let o = Object.getPrototypeOf(instance); o && o !== Object.prototype; o = Object.getPrototypeOf(o)) {
    for (const name of hidden[o.constructor?.name]?.proto ?? []) skip.add(name)
  }
  return Object.keys(instance).filter((n) => !n.startsWith('_') && !skip.has(n) && typeof instance[n] !== 'function')
}

function surface(objects) {
  const hidden = hiddenByDeclarations()
  const names = []
  for (const [cls, { statics, proto, own, instance }] of Object.entries(objects)) {
    if (statics) for (const m of methods(statics, 'static', hidden, own)) names.push(`${cls}.${m}`)
    if (proto) for (const m of methods(proto, 'proto', hidden, own)) names.push(`${cls}#${m}`)
    if (instance) for (const f of fields(instance, hidden)) names.push(`${cls}#${f}`)
  }
  return [...new Set(names)].sort()
}

// --- Running and the table ----------------------------------------------------------------------

async function runEntry(entry) {
  const started = Date.now()
  let timer
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`__deadline__ no answer within ${entry.deadline / 1000} s`)), entry.deadline)
  })
  try {
    await Promise.race([Promise.resolve().then(entry.fn), deadline])
  } catch (e) {
    if (String(e?.message).startsWith('__deadline__')) return e.message.slice(13)
    if (entry.kind === 'refused') {
      if (!(e instanceof entry.err)) return `raised ${e?.constructor?.name} (${e?.message}), not ${entry.err.name}`
      if (!String(e.message).includes(entry.text)) return `${e.constructor.name} without "${entry.text}": ${e.message}`
      if (Date.now() - started > 10_000) return `refused only after ${(Date.now() - started) / 1000} s`
      return null
    }
    return `${e?.constructor?.name}: ${e?.stack ?? e}`
  } finally {
    clearTimeout(timer)
  }
  return entry.kind === 'refused' ? `returned instead of raising ${entry.err.name}` : null
}

function table(classes, list) {
  const worksN = list.filter((e) => e.kind === 'works').length
  const rows = list
    .sort((a, b) => (a.name < b.name ? -1 : 1))
    .map((e) => {
      let what = e.note
      if (e.kind === 'refused') what = `\`${e.err.name}\`, message contains "${e.text}"${e.note ? `; ${e.note}` : ''}`
      return `| \`${e.name}\` | ${e.kind} | ${what} |`
    })
  return [
    `# Surface of \`${PACKAGE}\` ${VERSION} (JS) against sandboxd`,
    '',
    `Generated by \`tests/e2b/test_surface.mjs${MODE === 'e2b' ? '' : ' ' + MODE}\`: every public method ${MODE === 'e2b' ? 'and field ' : ''}of ${classes.map((c) => `\`${c}\``).join(', ')} ` +
      '(static `Class.name`, instance `Class#name`; public = not private or protected in the SDK\'s type ' +
      'declarations), found by introspection and called against the daemon under a deadline.' +
      (MODE === 'e2b' ? '' : ' The `Sandbox` rows are what the code interpreter\'s `Sandbox` adds to `e2b`\'s; ' +
        'what it inherits is in [js.md](js.md).'),
    '',
    `works ${worksN}, refused ${list.length - worksN}`,
    '',
    '| class.method | works/refused | what is asserted, or the error and its message |',
    '|---|---|---|',
    ...rows,
  ].join('\n') + '\n'
}

async function main() {
  for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
    if (!process.env[v]) {
      console.error(`${v} must be set`)
      process.exit(2)
    }
  }
  const failed = []
  const seen = {}
  const entries = ENTRIES[MODE]
  try {
    for (const entry of entries.values()) {
      const started = Date.now()
      const problem = await runEntry(entry)
      // The classes the SDK does not export, from the objects it handed out.
      if (MODE !== 'e2b') {
        if (c.execution && !seen.Execution) seen.Execution = Object.getPrototypeOf(c.execution)
        if (c.execution && !seen.Result) seen.Result = Object.getPrototypeOf(c.execution.results[0])
        if (c.failed && !seen.ExecutionError) seen.ExecutionError = Object.getPrototypeOf(c.failed.error)
      } else if (c.sbx && !seen.Filesystem) {
        seen.Filesystem = Object.getPrototypeOf(c.sbx.files)
        seen.Commands = Object.getPrototypeOf(c.sbx.commands)
        seen.Pty = Object.getPrototypeOf(c.sbx.pty)
        seen.Git = Object.getPrototypeOf(c.sbx.git)
      }
      if (c.bg && !seen.CommandHandle) seen.CommandHandle = Object.getPrototypeOf(c.bg)
      if (c.watch && !seen.WatchHandle) seen.WatchHandle = Object.getPrototypeOf(c.watch)
      if (c.sandboxPager && !seen.SandboxPaginator) seen.SandboxPaginator = Object.getPrototypeOf(c.sandboxPager)
      if (c.snapshotPager && !seen.SnapshotPaginator) seen.SnapshotPaginator = Object.getPrototypeOf(c.snapshotPager)
      if (problem) {
        failed.push([entry.name, problem])
        console.log(`FAIL  ${entry.name}: ${problem}`)
      } else {
        console.log(`ok    ${entry.name} (${entry.kind}) [${((Date.now() - started) / 1000).toFixed(1)}s]`)
      }
    }
  } finally {
    for (const id of new Set(c.created)) await Sandbox.kill(id).catch(() => {})
    for (const clean of c.cleanups) await Promise.resolve().then(clean).catch(() => {})
  }
  const objects = MODE === 'e2b' ? {
    Sandbox: { statics: Sandbox, proto: Sandbox.prototype },
    Template: { statics: Template },
    TemplateBase: { proto: e2b.TemplateBase.prototype },
    Volume: { statics: Volume, proto: Volume.prototype },
    Secret: { statics: Secret },
    SecretPaginator: { proto: e2b.SecretPaginator.prototype },
  } : {
    // What the code interpreter's Sandbox adds to e2b's (the rest is js.md's).
    Sandbox: { statics: CI.Sandbox, proto: CI.Sandbox.prototype, own: true },
  }
  for (const [cls, proto] of Object.entries(seen)) objects[cls] = { proto }
  if (MODE === 'e2b') {
    // Public fields, from the instances the run made.
    const instances = { Sandbox: c.sbx, Volume: c.vol, CommandHandle: c.bg, WatchHandle: c.watch,
      SandboxPaginator: c.sandboxPager, SnapshotPaginator: c.snapshotPager, SecretPaginator: c.secretPager,
      Filesystem: c.sbx?.files, Commands: c.sbx?.commands, Pty: c.sbx?.pty, Git: c.sbx?.git }
    for (const [cls, instance] of Object.entries(instances)) if (instance && objects[cls]) objects[cls].instance = instance
  }
  const reached = MODE === 'e2b'
    ? ['Filesystem', 'Commands', 'Pty', 'Git', 'CommandHandle', 'WatchHandle', 'SandboxPaginator', 'SnapshotPaginator']
    : ['Execution', 'Result', 'ExecutionError']
  for (const cls of reached) {
    if (!seen[cls]) failed.push([cls, 'never reached: its methods were not enumerated'])
  }
  const found = surface(objects)
  for (const name of found.filter((n) => !entries.has(n))) failed.push([name, 'new method, classify it (no entry in the surface test)'])
  for (const name of [...entries.keys()].filter((n) => !found.includes(n))) failed.push([name, 'has an entry but the SDK no longer has it'])
  const text = table(Object.keys(objects).sort(), [...entries.values()].filter((e) => found.includes(e.name)))
  const current = fs.existsSync(TABLE) ? fs.readFileSync(TABLE, 'utf8') : null
  if (current !== text) {
    if (process.env.SURFACE_UPDATE === '1') {
      fs.mkdirSync(path.dirname(TABLE), { recursive: true })
      fs.writeFileSync(TABLE, text)
      console.log(`wrote ${TABLE}`)
    } else {
      fs.writeFileSync(`${TABLE}.new`, text)
      failed.push([TABLE, `differs from the regenerated table: see ${TABLE}.new (SURFACE_UPDATE=1 rewrites it)`])
    }
  }
  const worksN = [...entries.values()].filter((e) => e.kind === 'works').length
  console.log(`\n${PACKAGE} ${VERSION} (JS): ${found.length} public names; works ${worksN}, refused ${entries.size - worksN}; ${failed.length} failed`)
  for (const [name, problem] of failed) console.log(`FAIL  ${name}: ${String(problem).split('\n')[0]}`)
  // A call still pending must not keep the process alive.
  process.exit(failed.length ? 1 : 0)
}

main()
