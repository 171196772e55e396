// The `@daytonaio/sdk` TypeScript SDK's whole public surface against the daemon, method by method.
//
// Run by crates/sandboxd/tests/daytona_surface.rs with DAYTONA_API_URL and an admin DAYTONA_API_KEY;
// the Python twin is test_surface.py, whose docs this follows.
//
// The classes are listed by introspection: their instances' prototype chains give the methods and
// accessors, less what the SDK's own declarations (`cjs/*.d.ts`) mark `private` or `protected`
// (JavaScript keeps those on the prototype too). Every method found must have an entry in ENTRIES:
// works (called, its result asserted) or refused (the SDK's `DaytonaError`, within 5 s, with the
// daemon's message saying what is not supported and what to use instead). A method without an
// entry fails the run ("new method, classify it"). Every call runs under a deadline.
//
// The table `tests/daytona/surface/typescript.md` is regenerated and compared with the checked-in
// file: on a difference the run fails and writes `typescript.md.new` (SURFACE_UPDATE=1 rewrites
// the file instead). Its text holds no ids or timings.

import assert from 'node:assert/strict'
import { randomBytes, randomUUID } from 'node:crypto'
import { existsSync, readFileSync, writeFileSync, mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { createRequire } from 'node:module'
import * as sdk from '@daytonaio/sdk'

const {
  Daytona, DaytonaError, DaytonaBadRequestError, DaytonaNotFoundError, DaytonaFileNotFoundError,
  DaytonaGitRepoNotFoundError, PtyHandle,
} = sdk
const RUN = randomBytes(4).toString('hex')
const DEADLINE = 30_000
const SLOW = 120_000
const FIRST = 300_000
const IMAGE = process.env.SURFACE_IMAGE ?? 'team/app:v1'
const HERE = dirname(fileURLToPath(import.meta.url))
const TABLE = join(HERE, 'surface', 'typescript.md')
const require = createRequire(import.meta.url)
const SDK_DIR = dirname(require.resolve('@daytonaio/sdk/package.json'))
const VERSION = JSON.parse(readFileSync(join(SDK_DIR, 'package.json'), 'utf8')).version

const D = new Daytona()
const CTX = {}
const sbx = () => CTX.sbx
const other = () => CTX.other

/** Names each `.d.ts` of the SDK declares `private` or `protected`, by class. */
function hiddenMembers() {
  const hidden = {}
  const dir = join(SDK_DIR, 'cjs')
  for (const file of ['Daytona', 'Sandbox', 'FileSystem', 'Process', 'PtyHandle', 'Git', 'CodeInterpreter',
    'LspServer', 'ComputerUse', 'Snapshot', 'Volume', 'Secret', 'WarmPool']) {
    let current = null
    for (const line of readFileSync(join(dir, `${file}.d.ts`), 'utf8').split('\n')) {
      const start = line.match(/^export declare class (\w+)/)
      if (start) current = hidden[start[1]] = new Set()
      else if (line === '}') current = null
      const member = line.match(/^ {4}(?:private|protected) (?:static )?(?:readonly )?(\w+)/)
      if (current && member) current.add(member[1])
    }
  }
  return hidden
}

/** The public methods and accessors of `instance`'s class, as the SDK declares them. */
function members(instance, hidden) {
  const names = new Set()
  const cls = instance.constructor
  for (let p = cls.prototype; p && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    for (const name of Object.getOwnPropertyNames(p)) {
      if (name === 'constructor' || name.startsWith('_')) continue
      if ((hidden[cls.name] ?? new Set()).has(name)) continue
      names.add(name)
    }
  }
  return names
}

/** `{"Class.method"}` of the classes reached from the client and a sandbox. */
function surface() {
  const hidden = hiddenMembers()
  const cu = sbx().computerUse
  const instances = {
    Daytona: D, Sandbox: sbx(), FileSystem: sbx().fs, Process: sbx().process, Git: sbx().git,
    CodeInterpreter: sbx().codeInterpreter, LspServer: CTX.lsp, ComputerUse: cu, Mouse: cu.mouse,
    Keyboard: cu.keyboard, Screenshot: cu.screenshot, Display: cu.display, RecordingService: cu.recording,
    Accessibility: cu.accessibility, SnapshotService: D.snapshot, VolumeService: D.volume,
    SecretService: D.secret, WarmPoolService: D.warmPool,
  }
  const found = new Set()
  for (const [name, instance] of Object.entries(instances)) {
    assert.equal(instance.constructor.name, name)
    for (const m of members(instance, hidden)) found.add(`${name}.${m}`)
  }
  for (const m of Object.getOwnPropertyNames(PtyHandle.prototype)) {
    if (m !== 'constructor' && !hidden.PtyHandle.has(m)) found.add(`PtyHandle.${m}`)
  }
  return found
}

// ---------------------------------------------------------------------------------------------
// Entries: "Class.method" -> {column, text, call, deadline, says}. Run in order; the table is sorted.

const ENTRIES = new Map()
function works(name, text, call, deadline = DEADLINE) {
  assert.ok(!ENTRIES.has(name), name)
  ENTRIES.set(name, { column: 'works', text, call, deadline })
}
function refused(name, call, says) {
  assert.ok(!ENTRIES.has(name), name)
  ENTRIES.set(name, { column: 'refused', call, deadline: DEADLINE, says })
}
async function rejects(promise, cls) {
  try {
    await promise
  } catch (e) {
    assert.ok(e instanceof cls, `${e?.constructor?.name}: ${e?.message}`)
    return e
  }
  throw new assert.AssertionError({ message: `expected ${cls.name}` })
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

// Daytona ---------------------------------------------------------------------------------------

works('Daytona.create', 'two sandboxes (a python one and one from `base`) start with their labels; an unknown'
  + ' snapshot is `DaytonaNotFoundError`', async () => {
  await rejects(D.create({ snapshot: `no-such-${RUN}`, labels: { surface: RUN } }), DaytonaNotFoundError)
  CTX.sbx = await D.create({ language: 'python', name: `surface-ts-${RUN}`, labels: { surface: RUN } },
    { timeout: FIRST / 1000 })
  CTX.other = await D.create({ snapshot: 'base', labels: { surface: RUN } }, { timeout: SLOW / 1000 })
  for (const s of [sbx(), other()]) assert.equal(s.state, 'started')
}, FIRST)
works('Daytona.get', 'by id and by name; an unknown name is `DaytonaNotFoundError`', async () => {
  assert.equal((await D.get(sbx().id)).id, sbx().id)
  assert.equal((await D.get(`surface-ts-${RUN}`)).id, sbx().id)
  await rejects(D.get(`no-such-${RUN}`), DaytonaNotFoundError)
})
works('Daytona.list', 'a label filter lists exactly the two sandboxes', async () => {
  const ids = []
  for await (const s of D.list({ labels: { surface: RUN } })) ids.push(s.id)
  assert.deepEqual(ids.sort(), [sbx().id, other().id].sort())
})
works('Daytona.stop', 'the sandbox is `stopped`', async () => {
  await D.stop(other())
  assert.equal((await D.get(other().id)).state, 'stopped')
}, SLOW)
works('Daytona.start', 'the sandbox is `started` and runs commands', async () => {
  await D.start(other(), SLOW / 1000)
  assert.equal((await other().process.executeCommand('echo up')).result.trim(), 'up')
}, SLOW)

// Sandbox ---------------------------------------------------------------------------------------

works('Sandbox.createLspServer', 'an `LspServer` for a language and a project (client-side)', async () => {
  assert.equal(CTX.lsp.constructor.name, 'LspServer')
})
works('Sandbox.refreshData', 'the record is read again: `started`, same labels', async () => {
  await sbx().refreshData()
  assert.equal(sbx().state, 'started')
  assert.equal(sbx().labels.surface, RUN)
})
works('Sandbox.getUserHomeDir', '`/home/user`', async () => assert.equal(await sbx().getUserHomeDir(), '/home/user'))
works('Sandbox.getUserRootDir', '`/home/user` (the SDK\'s alias of the home directory)',
  async () => assert.equal(await sbx().getUserRootDir(), '/home/user'))
works('Sandbox.getWorkDir', 'an absolute directory', async () => assert.ok((await sbx().getWorkDir()).startsWith('/')))
works('Sandbox.setLabels', 'the labels are replaced and echoed', async () => {
  assert.equal((await sbx().setLabels({ surface: RUN, extra: 'yes' })).extra, 'yes')
})
works('Sandbox.setAutostopInterval', 'the record says 30 minutes; a negative one is `DaytonaError`', async () => {
  await rejects(sbx().setAutostopInterval(-1), DaytonaError)
  await sbx().setAutostopInterval(30)
  assert.equal(sbx().autoStopInterval, 30)
})
works('Sandbox.setAutoPauseInterval', 'the record says 10 minutes and auto-stop off (one or the other); 0 turns'
  + ' it off; a negative one is `DaytonaError`', async () => {
  await rejects(sbx().setAutoPauseInterval(-1), DaytonaError)
  await sbx().setAutoPauseInterval(10)
  await sbx().refreshData()
  assert.deepEqual([sbx().autoPauseInterval, sbx().autoStopInterval], [10, 0])
  await sbx().setAutoPauseInterval(0)
  await sbx().refreshData()
  assert.equal(sbx().autoPauseInterval, 0)
})
works('Sandbox.setAutoArchiveInterval', 'the record says 60 minutes', async () => {
  await sbx().setAutoArchiveInterval(60)
  assert.equal(sbx().autoArchiveInterval, 60)
})
works('Sandbox.setAutoDeleteInterval', 'the record says 120 minutes', async () => {
  await sbx().setAutoDeleteInterval(120)
  assert.equal(sbx().autoDeleteInterval, 120)
})
works('Sandbox.refreshActivity', 'answers without an error', async () => sbx().refreshActivity())
works('Sandbox.getPreviewLink', 'a URL and a token for port 8080', async () => {
  const link = await sbx().getPreviewLink(8080)
  assert.ok(link.url.startsWith('http') && link.token)
})
works('Sandbox.getSignedPreviewUrl', 'a URL with a token for port 8080', async () => {
  CTX.signed = await sbx().getSignedPreviewUrl(8080, 60)
  assert.ok(CTX.signed.url.startsWith('http') && CTX.signed.token)
})
works('Sandbox.expireSignedPreviewUrl', 'the signed link is ended',
  async () => sbx().expireSignedPreviewUrl(8080, CTX.signed.token))
works('Sandbox.uploadUrl', 'a signed URL that uploads without a token', async () => {
  const url = await sbx().uploadUrl('/home/user/signed-up.txt', 60)
  const form = new FormData()
  form.append('file', new Blob(['uploaded']), 'signed-up.txt')
  const answer = await fetch(url, { method: 'POST', body: form })
  assert.ok(answer.ok, `${answer.status}`)
  assert.equal((await sbx().fs.downloadFile('/home/user/signed-up.txt')).toString(), 'uploaded')
})
works('Sandbox.downloadUrl', 'a signed URL that downloads the file without a token', async () => {
  await sbx().fs.uploadFile(Buffer.from('signed body'), '/home/user/signed.txt')
  const answer = await fetch(await sbx().downloadUrl('/home/user/signed.txt', 60))
  assert.equal(await answer.text(), 'signed body')
})
works('Sandbox.rotateSigningKey', 'a URL signed before the rotation is refused after it', async () => {
  const url = await sbx().downloadUrl('/home/user/signed.txt', 60)
  await sbx().rotateSigningKey()
  assert.ok([401, 403].includes((await fetch(url)).status))
})
works('Sandbox.updateEnv', 'a later command sees the variable', async () => {
  await sbx().updateEnv({ SURFACE_VAR: 'set-later' })
  assert.equal((await sbx().process.executeCommand('echo $SURFACE_VAR')).result.trim(), 'set-later')
})
works('Sandbox.updateSecrets', '`{}` detaches none and is accepted', async () => sbx().updateSecrets({}))
works('Sandbox.resize', 'memory grows to 2 GiB on the running sandbox', async () => {
  await sbx().resize({ memory: 2 })
  await sbx().refreshData()
  assert.equal(sbx().memory, 2)
})
works('Sandbox.waitForResizeComplete', 'returns at once (no resize in flight)', async () => sbx().waitForResizeComplete(30))
works('Sandbox.stop', 'the sandbox is `stopped`', async () => {
  await other().stop(SLOW / 1000)
  assert.equal(other().state, 'stopped')
}, SLOW)
works('Sandbox.waitUntilStopped', 'returns for a stopped sandbox', async () => other().waitUntilStopped(30))
works('Sandbox.start', 'the sandbox is `started` again', async () => {
  await other().start(SLOW / 1000)
  assert.equal(other().state, 'started')
}, SLOW)
works('Sandbox.waitUntilStarted', 'returns for a started sandbox', async () => other().waitUntilStarted(30))
works('Sandbox.pause', 'the sandbox is `paused` with its memory; `start` resumes it', async () => {
  await other().process.executeCommand('nohup sleep 1000 >/dev/null 2>&1 &')
  await other().pause(SLOW / 1000)
  assert.equal(other().state, 'paused')
  await other().start(SLOW / 1000)
  assert.ok((await other().process.executeCommand('ps -eo args')).result.includes('sleep 1000'))
}, SLOW)
works('Sandbox.createSnapshot', 'a snapshot of the sandbox\'s files, listed by name', async () => {
  await other().process.executeCommand('echo snap > /home/user/snap.txt')
  await other().createSnapshot(`surface-ts-snap-${RUN}`, SLOW / 1000)
  assert.equal((await D.snapshot.get(`surface-ts-snap-${RUN}`)).name, `surface-ts-snap-${RUN}`)
}, SLOW)
works('Sandbox.fork', 'a new sandbox with the files of the first', async () => {
  const fork = await other().fork({}, SLOW / 1000)
  try {
    assert.notEqual(fork.id, other().id)
    assert.equal((await fork.process.executeCommand('cat /home/user/snap.txt')).result.trim(), 'snap')
  } finally {
    await D.delete(fork)
  }
}, SLOW)
works('Daytona.fork', 'a new sandbox with the files of the first', async () => {
  const fork = await D.fork(other(), {}, SLOW / 1000)
  try {
    assert.equal((await fork.process.executeCommand('cat /home/user/snap.txt')).result.trim(), 'snap')
  } finally {
    await D.delete(fork)
  }
}, SLOW)

refused('Sandbox.archive', () => sbx().archive(), 'archiving is not supported')
refused('Sandbox.recover', () => sbx().recover(30), 'recover is not supported')
works('Sandbox.setTtl', '`autoDestroyAt` is that many minutes from now; 0 drops it', async () => {
  await sbx().setTtl(600)
  await sbx().refreshData()
  const left = new Date(sbx().autoDestroyAt).getTime() - Date.now()
  assert.ok(left > 600 * 60000 - 120000 && left <= 600 * 60000, String(left))
  await sbx().setTtl(0)
  await sbx().refreshData()
  assert.equal(sbx().autoDestroyAt, undefined)
})
works('Sandbox.updateNetworkSettings', 'the lists change on the running sandbox and its record shows them; a ' +
  "domain makes its own forwarder its resolver, empty lists give it the host's back", async () => {
  const resolver = async () => (await sbx().fs.downloadFile('/etc/resolv.conf')).toString()
  const before = await resolver()
  await sbx().updateNetworkSettings({ networkAllowList: '1.1.1.1', domainAllowList: 'example.com' })
  await sbx().refreshData()
  assert.deepEqual([sbx().networkAllowList, sbx().domainAllowList], ['1.1.1.1/32', 'example.com'])
  assert.notEqual(await resolver(), before)
  await sbx().updateNetworkSettings({ networkAllowList: '', domainAllowList: '' })
  await sbx().refreshData()
  assert.deepEqual([sbx().networkAllowList, sbx().domainAllowList], [undefined, undefined])
  assert.equal(await resolver(), before)
})
refused('Sandbox.createSshAccess', () => sbx().createSshAccess(), 'SSH access is not supported')
refused('Sandbox.revokeSshAccess', () => sbx().revokeSshAccess('token'), 'SSH access is not supported')
refused('Sandbox.validateSshAccess', () => sbx().validateSshAccess('token'), 'SSH access is not supported')
const plausible = (sample) => {
  assert.ok(sample.cpuCount >= 1 && sample.cpuUsedPct >= 0 && sample.cpuUsedPct <= 100, JSON.stringify(sample))
  assert.ok(sample.memUsed > 0 && sample.memUsed <= sample.memTotal, JSON.stringify(sample))
  assert.ok(Math.abs(Date.now() - new Date(sample.timestamp).getTime()) < 60000, String(sample.timestamp))
}
let latest
works('Sandbox.getMetricsLatest', 'a sample taken now: CPUs, CPU share, memory in use under its limit',
  async () => plausible(latest = await sbx().getMetricsLatest()))
works('Sandbox.getMetrics', 'its history since its creation, oldest first: the latest sample is kept, and one'
  + ' taken now ends it; a range that ended an hour ago is empty', async () => {
  const samples = await sbx().getMetrics()
  assert.ok(samples.length >= 2, JSON.stringify(samples))
  const times = samples.map((s) => new Date(s.timestamp).getTime())
  assert.deepEqual(times, [...times].sort((a, b) => a - b))
  assert.ok(times.includes(new Date(latest.timestamp).getTime()), JSON.stringify({ latest, samples }))
  plausible(samples[samples.length - 1])
  const hourAgo = new Date(Date.now() - 3600_000)
  assert.deepEqual(await sbx().getMetrics(new Date(hourAgo.getTime() - 300_000), hourAgo), [])
})

// FileSystem ------------------------------------------------------------------------------------

const F = '/home/user/surf'
works('FileSystem.createFolder', 'the folder exists; a mode that is not octal is `DaytonaBadRequestError`', async () => {
  await rejects(sbx().fs.createFolder('/home/user/bad', '999'), DaytonaBadRequestError)
  await sbx().fs.createFolder(F, '755')
  assert.ok((await sbx().fs.getFileDetails(F)).isDir)
})
works('FileSystem.uploadFile', 'bytes land at the path', async () => sbx().fs.uploadFile(Buffer.from('alpha beta\n'), `${F}/a.txt`))
works('FileSystem.uploadFiles', 'two files land at their paths', async () => sbx().fs.uploadFiles([
  { source: Buffer.from('one\n'), destination: `${F}/b.txt` },
  { source: Buffer.from('two\n'), destination: `${F}/c.txt` },
]))
works('FileSystem.uploadFileStream', 'a stream lands at the path',
  async () => sbx().fs.uploadFileStream(Buffer.from('streamed\n'), `${F}/d.txt`))
works('FileSystem.downloadFile', 'the uploaded bytes come back',
  async () => assert.equal((await sbx().fs.downloadFile(`${F}/a.txt`)).toString(), 'alpha beta\n'))
works('FileSystem.downloadFiles', 'two files come back in order', async () => {
  const got = await sbx().fs.downloadFiles([{ source: `${F}/b.txt` }, { source: `${F}/c.txt` }])
  assert.deepEqual(got.map((g) => g.result.toString()), ['one\n', 'two\n'])
})
works('FileSystem.downloadFileStream', 'the streamed bytes come back', async () => {
  const chunks = []
  for await (const c of await sbx().fs.downloadFileStream(`${F}/d.txt`)) chunks.push(c)
  assert.equal(Buffer.concat(chunks).toString(), 'streamed\n')
})
works('FileSystem.getFileDetails', 'size of a file; a missing path is `DaytonaFileNotFoundError`', async () => {
  assert.equal((await sbx().fs.getFileDetails(`${F}/a.txt`)).size, 11)
  await rejects(sbx().fs.getFileDetails(`${F}/none`), DaytonaFileNotFoundError)
})
works('FileSystem.listFiles', 'the folder lists its four files', async () => {
  assert.deepEqual((await sbx().fs.listFiles(F)).map((f) => f.name).sort(), ['a.txt', 'b.txt', 'c.txt', 'd.txt'])
})
works('FileSystem.findFiles', 'finds the line holding `beta`', async () => {
  assert.deepEqual((await sbx().fs.findFiles(F, 'beta')).map((m) => m.file), [`${F}/a.txt`])
})
works('FileSystem.searchFiles', 'the glob `*.txt` finds the four files',
  async () => assert.equal((await sbx().fs.searchFiles(F, '*.txt')).files.length, 4))
works('FileSystem.replaceInFiles', '`beta` becomes `gamma`', async () => {
  await sbx().fs.replaceInFiles([`${F}/a.txt`], 'beta', 'gamma')
  assert.equal((await sbx().fs.downloadFile(`${F}/a.txt`)).toString(), 'alpha gamma\n')
})
works('FileSystem.setFilePermissions', 'the mode becomes 600', async () => {
  await sbx().fs.setFilePermissions(`${F}/a.txt`, { mode: '600' })
  assert.equal((await sbx().process.executeCommand(`stat -c %a ${F}/a.txt`)).result.trim(), '600')
})
works('FileSystem.moveFiles', 'the file is at its new path only', async () => {
  await sbx().fs.moveFiles(`${F}/d.txt`, `${F}/e.txt`)
  assert.deepEqual((await sbx().fs.listFiles(F)).map((f) => f.name).sort(), ['a.txt', 'b.txt', 'c.txt', 'e.txt'])
})
works('FileSystem.deleteFile', 'the folder is gone (recursive)', async () => {
  await sbx().fs.deleteFile(F, true)
  await rejects(sbx().fs.getFileDetails(F), DaytonaFileNotFoundError)
})

// Process ---------------------------------------------------------------------------------------

works('Process.executeCommand', 'exit code and output, with cwd and env', async () => {
  const out = await sbx().process.executeCommand('echo $X; pwd; exit 3', '/tmp', { X: 'y' })
  assert.deepEqual([out.exitCode, out.result], [3, 'y\n/tmp\n'])
})
works('Process.codeRun', 'python prints its result and sees `env`; an error is a non-zero exit', async () => {
  const out = await sbx().process.codeRun("import os; print(6 * 7, os.environ['W'])", { env: { W: 'w' } })
  assert.equal(out.result.trim(), '42 w')
  assert.notEqual((await sbx().process.codeRun('1/0')).exitCode, 0)
})
works('Process.createSession', 'the session is made', async () => sbx().process.createSession('surf'))
works('Process.executeSessionCommand', 'shell state is kept between commands', async () => {
  await sbx().process.executeSessionCommand('surf', { command: 'export K=kept' })
  const out = await sbx().process.executeSessionCommand('surf', { command: 'echo $K' })
  assert.equal(out.output.trim(), 'kept')
  CTX.cmd = out.cmdId
  CTX.reader = (await sbx().process.executeSessionCommand('surf',
    { command: 'read line; echo got $line', runAsync: true })).cmdId
})
works('Process.getSession', 'the session lists its commands; an unknown one is `DaytonaNotFoundError`', async () => {
  await rejects(sbx().process.getSession(`no-such-${RUN}`), DaytonaNotFoundError)
  assert.equal((await sbx().process.getSession('surf')).commands.length, 3)
})
works('Process.listSessions', 'the session is listed',
  async () => assert.ok((await sbx().process.listSessions()).some((s) => s.sessionId === 'surf')))
works('Process.getSessionCommand', 'the command\'s exit code',
  async () => assert.equal((await sbx().process.getSessionCommand('surf', CTX.cmd)).exitCode, 0))
works('Process.sendSessionCommandInput', 'a running command reads the input',
  async () => sbx().process.sendSessionCommandInput('surf', CTX.reader, 'hello\n'))
works('Process.getSessionCommandLogs', 'the output; followed, the streamed output', async () => {
  assert.equal((await sbx().process.getSessionCommandLogs('surf', CTX.cmd)).output.trim(), 'kept')
  let seen = ''
  await sbx().process.getSessionCommandLogs('surf', CTX.reader, (c) => (seen += c), (c) => (seen += c))
  assert.ok(seen.includes('got hello'), seen)
})
works('Process.deleteSession', 'the session is no longer listed', async () => {
  await sbx().process.deleteSession('surf')
  assert.ok(!(await sbx().process.listSessions()).some((s) => s.sessionId === 'surf'))
})
refused('Process.getEntrypointSession', () => sbx().process.getEntrypointSession(), 'the entrypoint session is not kept')
refused('Process.getEntrypointLogs', () => sbx().process.getEntrypointLogs(), 'the entrypoint session is not kept')

works('Process.createPty', 'a PTY with its size runs a shell', async () => {
  CTX.seen = ''
  CTX.pty = await sbx().process.createPty({ id: 'surf-pty', cols: 80, rows: 24,
    onData: (d) => (CTX.seen += Buffer.from(d).toString()) })
})
works('PtyHandle.waitForConnection', 'returns once connected', async () => CTX.pty.waitForConnection())
works('PtyHandle.isConnected', 'true', async () => assert.equal(CTX.pty.isConnected(), true))
works('PtyHandle.sendInput', 'the shell echoes the input', async () => {
  await CTX.pty.sendInput('echo pty-$((6*7))\n')
  const deadline = Date.now() + DEADLINE
  while (!CTX.seen.includes('pty-42')) {
    assert.ok(Date.now() < deadline, CTX.seen)
    await sleep(50)
  }
})
works('PtyHandle.resize', 'the PTY\'s size changes', async () => {
  const info = await CTX.pty.resize(100, 30)
  assert.deepEqual([info.cols, info.rows], [100, 30])
})
works('Process.listPtySessions', 'the PTY is listed',
  async () => assert.ok((await sbx().process.listPtySessions()).some((p) => p.id === 'surf-pty')))
works('Process.getPtySessionInfo', 'the PTY\'s size', async () => {
  const info = await sbx().process.getPtySessionInfo('surf-pty')
  assert.deepEqual([info.cols, info.rows], [100, 30])
})
works('Process.resizePtySession', 'the PTY\'s size changes', async () => {
  const info = await sbx().process.resizePtySession('surf-pty', 120, 40)
  assert.deepEqual([info.cols, info.rows], [120, 40])
})
works('PtyHandle.disconnect', 'the connection closes; the PTY lives on', async () => {
  await CTX.pty.disconnect()
  assert.ok((await sbx().process.listPtySessions()).some((p) => p.id === 'surf-pty'))
})
works('Process.connectPty', 'attaches to the PTY again', async () => {
  CTX.pty = await sbx().process.connectPty('surf-pty', { onData: () => {} })
  await CTX.pty.waitForConnection()
})
works('PtyHandle.kill', 'the PTY ends', async () => CTX.pty.kill())
works('PtyHandle.wait', 'the killed PTY\'s result', async () => CTX.pty.wait())
works('PtyHandle.exitCode', 'an exit code, or none for a killed shell',
  async () => assert.ok(CTX.pty.exitCode === undefined || Number.isInteger(CTX.pty.exitCode)))
works('PtyHandle.error', 'a string or none',
  async () => assert.ok(CTX.pty.error === undefined || typeof CTX.pty.error === 'string'))
works('Process.killPtySession', 'the PTY is no longer active', async () => {
  const pty = await sbx().process.createPty({ id: 'surf-pty2', onData: () => {} })
  await pty.waitForConnection()
  await pty.disconnect()
  await sbx().process.killPtySession('surf-pty2')
  const deadline = Date.now() + DEADLINE
  while ((await sbx().process.listPtySessions()).some((p) => p.id === 'surf-pty2' && p.active)) {
    assert.ok(Date.now() < deadline)
    await sleep(200)
  }
})

// Code interpreter -------------------------------------------------------------------------------

works('CodeInterpreter.runCode', 'state is kept between runs; stdout streams', async () => {
  await sbx().codeInterpreter.runCode('n = 21')
  let seen = ''
  const out = await sbx().codeInterpreter.runCode('print(n * 2)', { onStdout: (m) => (seen += m.output) })
  assert.deepEqual([out.stdout, seen], ['42\n', '42\n'])
})
works('CodeInterpreter.createContext', 'a context with its cwd', async () => {
  CTX.context = await sbx().codeInterpreter.createContext('/tmp')
  assert.equal(CTX.context.cwd, '/tmp')
})
works('CodeInterpreter.listContexts', 'the context is listed',
  async () => assert.ok((await sbx().codeInterpreter.listContexts()).some((c) => c.id === CTX.context.id)))
works('CodeInterpreter.deleteContext', 'the context is no longer listed', async () => {
  await sbx().codeInterpreter.deleteContext(CTX.context)
  assert.ok(!(await sbx().codeInterpreter.listContexts()).some((c) => c.id === CTX.context.id))
})

// Git -----------------------------------------------------------------------------------------

const REPO = '/home/user/repo'
const BARE = '/home/user/bare.git'
const git = () => sbx().git
works('Git.init', 'a repository and a bare one', async () => {
  await git().init(REPO, false, 'main')
  await git().init(BARE, true)
})
works('Git.configureUser', 'the repository\'s user is set',
  async () => git().configureUser('Surface', 'surface@example.com', 'local', REPO))
works('Git.setConfig', 'a local setting is written',
  async () => git().setConfig('surface.run', RUN, 'local', REPO))
works('Git.getConfig', 'the setting is read back',
  async () => assert.equal(await git().getConfig('surface.run', 'local', REPO), RUN))
works('Git.add', 'a new file is staged', async () => {
  await sbx().fs.uploadFile(Buffer.from('hello\n'), `${REPO}/hello.txt`)
  await git().add(REPO, ['hello.txt'])
})
works('Git.status', 'the staged file, on branch main; a folder that is no repository is'
  + ' `DaytonaGitRepoNotFoundError`', async () => {
  await rejects(git().status('/tmp'), DaytonaGitRepoNotFoundError)
  const status = await git().status(REPO)
  assert.equal(status.currentBranch, 'main')
  assert.deepEqual(status.fileStatus.map((f) => f.name), ['hello.txt'])
})
works('Git.commit', 'a commit hash',
  async () => assert.ok((await git().commit(REPO, 'first', 'Surface', 'surface@example.com')).sha.length >= 7))
works('Git.createBranch', 'the branch is made', async () => git().createBranch(REPO, 'feature'))
works('Git.branches', 'main and feature',
  async () => assert.deepEqual((await git().branches(REPO)).branches.sort(), ['feature', 'main']))
works('Git.checkoutBranch', 'the current branch is feature', async () => {
  await git().checkoutBranch(REPO, 'feature')
  assert.equal((await git().status(REPO)).currentBranch, 'feature')
  await git().checkoutBranch(REPO, 'main')
})
works('Git.deleteBranch', 'only main is left', async () => {
  await git().deleteBranch(REPO, 'feature')
  assert.deepEqual((await git().branches(REPO)).branches, ['main'])
})
works('Git.restore', 'a changed file is restored from the index', async () => {
  await sbx().fs.uploadFile(Buffer.from('changed\n'), `${REPO}/hello.txt`)
  await git().restore(REPO, ['hello.txt'])
  assert.equal((await sbx().fs.downloadFile(`${REPO}/hello.txt`)).toString(), 'hello\n')
})
works('Git.reset', 'a staged file is unstaged', async () => {
  await sbx().fs.uploadFile(Buffer.from('new\n'), `${REPO}/new.txt`)
  await git().add(REPO, ['new.txt'])
  await git().reset(REPO, undefined, undefined, ['new.txt'])
  const status = await sbx().process.executeCommand(`git -C ${REPO} status --porcelain new.txt`)
  assert.equal(status.result.trim(), '?? new.txt')
})
works('Git.remoteAdd', 'the bare repository is `origin`', async () => git().remoteAdd(REPO, 'origin', BARE))
works('Git.remotes', 'origin is listed',
  async () => assert.ok((await git().remotes(REPO)).remotes.some((r) => r.name === 'origin')))
works('Git.remoteGet', 'origin\'s URL', async () => assert.equal(await git().remoteGet(REPO, 'origin'), BARE))
works('Git.push', 'main reaches the bare repository', async () => {
  await git().push(REPO, undefined, undefined, 'main', 'origin', true)
  assert.equal((await sbx().process.executeCommand(`git -C ${BARE} log --format=%s main`)).result.trim(), 'first')
})
works('Git.clone', 'a clone of the bare repository holds the file', async () => {
  await git().clone(`file://${BARE}`, '/home/user/clone', 'main')
  assert.equal((await sbx().fs.downloadFile('/home/user/clone/hello.txt')).toString(), 'hello\n')
})
works('Git.pull', 'the clone pulls a new commit', async () => {
  await sbx().process.executeCommand(
    `cd ${REPO} && echo two > two.txt && git add two.txt && git commit -qm second && git push -q origin main`)
  await git().pull('/home/user/clone')
  assert.equal((await sbx().fs.downloadFile('/home/user/clone/two.txt')).toString(), 'two\n')
})
works('Git.dangerouslyAuthenticate', 'the credentials are stored in the user\'s store', async () => {
  await git().dangerouslyAuthenticate('surface', 'not-a-secret', 'git.example.com')
  assert.ok((await sbx().process.executeCommand('cat /home/user/.git-credentials')).result.includes('git.example.com'))
})

// Language servers ------------------------------------------------------------------------------
// pylsp and typescript-language-server are the host's, which a sandbox of `base` sees under /usr
// (scripts/lsp-servers installs them).

const LSP_DIR = '/home/user/lsp'
const LSP_TS = "export class Greeter {\n  hello(): string {\n    return 'hi'\n  }\n}\n\n" +
  'export function main(): string {\n  return new Greeter().hel\n}\n'
const LSP_PY = 'class Greeter:\n    def hello(self):\n        return 1\n'
const lsp = () => CTX.lsp
works('LspServer.start', 'typescript-language-server answers; starting it again is a no-op; a missing'
  + ' project is `DaytonaBadRequestError` (the SDK refuses an unknown language itself)', async () => {
  await sbx().fs.createFolder(LSP_DIR, '755')
  await sbx().fs.uploadFile(Buffer.from(LSP_TS), `${LSP_DIR}/app.ts`)
  await sbx().fs.uploadFile(Buffer.from(LSP_PY), `${LSP_DIR}/app.py`)
  await rejects(sbx().createLspServer('cobol', LSP_DIR), DaytonaError)
  await rejects((await sbx().createLspServer('typescript', `${LSP_DIR}/none`)).start(), DaytonaBadRequestError)
  CTX.lsp = await sbx().createLspServer('typescript', LSP_DIR)
  await lsp().start()
  await lsp().start()
}, SLOW)
works('LspServer.didOpen', 'the file is open; a missing one is `DaytonaNotFoundError`', async () => {
  await rejects(lsp().didOpen(`${LSP_DIR}/missing.ts`), DaytonaNotFoundError)
  await lsp().didOpen(`${LSP_DIR}/app.ts`)
})
works('LspServer.completions', '`hello` is offered after `new Greeter().hel`', async () => {
  const list = await lsp().completions(`${LSP_DIR}/app.ts`, { line: 7, character: 26 })
  assert.ok(list.items.some((i) => i.label === 'hello'), JSON.stringify(list.items.map((i) => i.label)))
})
works('LspServer.documentSymbols', '`Greeter`, `hello` and `main`, each on its line', async () => {
  const lines = Object.fromEntries((await lsp().documentSymbols(`${LSP_DIR}/app.ts`))
    .map((s) => [s.name, s.location.range.start.line]))
  assert.deepEqual([lines.Greeter, lines.hello, lines.main], [0, 1, 6], JSON.stringify(lines))
})
works('LspServer.sandboxSymbols', '`Greeter` is found in the project\'s .ts file', async () => {
  const found = await lsp().sandboxSymbols('Greeter')
  assert.ok(found.some((s) => s.name === 'Greeter' && s.location.uri.endsWith('/app.ts')), JSON.stringify(found))
})
works('LspServer.workspaceSymbols', '(deprecated alias) `main` is found', async () => {
  assert.ok((await lsp().workspaceSymbols('main')).some((s) => s.name === 'main'))
})
works('LspServer.didClose', 'the file is closed; pylsp serves a Python file of the same project', async () => {
  await lsp().didClose(`${LSP_DIR}/app.ts`)
  const py = await sbx().createLspServer('python', LSP_DIR)
  await py.start()
  await py.didOpen(`${LSP_DIR}/app.py`)
  assert.ok((await py.documentSymbols(`${LSP_DIR}/app.py`)).some((s) => s.name === 'hello'))
  await py.stop()
}, SLOW)
works('LspServer.stop', 'the server exits: a call then is `DaytonaNotFoundError`; stopping again is a'
  + ' no-op', async () => {
  await lsp().stop()
  await rejects(lsp().documentSymbols(`${LSP_DIR}/app.ts`), DaytonaNotFoundError)
  await lsp().stop()
})

// Computer use: refused --------------------------------------------------------------------------

const CU = 'computer use (a desktop) is not supported'
const cu = () => sbx().computerUse
const region = { x: 0, y: 0, width: 1, height: 1 }
for (const [name, call] of Object.entries({
  'ComputerUse.start': () => cu().start(),
  'ComputerUse.stop': () => cu().stop(),
  'ComputerUse.getStatus': () => cu().getStatus(),
  'ComputerUse.getProcessStatus': () => cu().getProcessStatus('xvfb'),
  'ComputerUse.restartProcess': () => cu().restartProcess('xvfb'),
  'ComputerUse.getProcessLogs': () => cu().getProcessLogs('xvfb'),
  'ComputerUse.getProcessErrors': () => cu().getProcessErrors('xvfb'),
  'Mouse.getPosition': () => cu().mouse.getPosition(),
  'Mouse.move': () => cu().mouse.move(1, 1),
  'Mouse.click': () => cu().mouse.click(1, 1),
  'Mouse.drag': () => cu().mouse.drag(1, 1, 2, 2),
  'Mouse.scroll': () => cu().mouse.scroll(1, 1, 'down'),
  'Keyboard.type': () => cu().keyboard.type('x'),
  'Keyboard.press': () => cu().keyboard.press('a'),
  'Keyboard.hotkey': () => cu().keyboard.hotkey('ctrl+c'),
  'Screenshot.takeFullScreen': () => cu().screenshot.takeFullScreen(),
  'Screenshot.takeRegion': () => cu().screenshot.takeRegion(region),
  'Screenshot.takeCompressed': () => cu().screenshot.takeCompressed(),
  'Screenshot.takeCompressedRegion': () => cu().screenshot.takeCompressedRegion(region),
  'Display.getInfo': () => cu().display.getInfo(),
  'Display.getWindows': () => cu().display.getWindows(),
  'RecordingService.start': () => cu().recording.start(),
  'RecordingService.stop': () => cu().recording.stop('rec'),
  'RecordingService.list': () => cu().recording.list(),
  'RecordingService.get': () => cu().recording.get('rec'),
  'RecordingService.delete': () => cu().recording.delete('rec'),
  'RecordingService.download': () => cu().recording.download('rec', `/tmp/surface-ts-${RUN}.mp4`),
  'Accessibility.getTree': () => cu().accessibility.getTree(),
  'Accessibility.findNodes': () => cu().accessibility.findNodes({ role: 'button' }),
  'Accessibility.focusNode': () => cu().accessibility.focusNode('n'),
  'Accessibility.invokeNode': () => cu().accessibility.invokeNode('n'),
  'Accessibility.setNodeValue': () => cu().accessibility.setNodeValue('n', 'v'),
})) {
  // The download asks for a stream, so the SDK's error shows the unread body ("[object Object]").
  refused(name, call, name === 'RecordingService.download' ? '' : CU)
}

// Snapshots, volumes, secrets, warm pools -------------------------------------------------------

works('SnapshotService.list', 'the sandbox\'s snapshot and the default one are listed', async () => {
  const names = (await D.snapshot.list()).items.map((s) => s.name)
  for (const n of ['code-interpreter-v1', `surface-ts-snap-${RUN}`]) assert.ok(names.includes(n), `${n}: ${names}`)
})
works('SnapshotService.get', 'by name; an unknown name is `DaytonaNotFoundError`', async () => {
  assert.equal((await D.snapshot.get('code-interpreter-v1')).state, 'active')
  await rejects(D.snapshot.get(`no-such-${RUN}`), DaytonaNotFoundError)
})
works('SnapshotService.activate', 'an active snapshot stays active',
  async () => assert.equal((await D.snapshot.activate(`surface-ts-snap-${RUN}`)).state, 'active'))
works('SnapshotService.create', 'a snapshot from an image string is `active`', async () => {
  const made = await D.snapshot.create({ name: `surface-ts-img-${RUN}`, image: IMAGE }, { timeout: SLOW / 1000 })
  assert.equal(made.state, 'active')
}, SLOW)
works('SnapshotService.delete', 'both snapshots are gone', async () => {
  await D.snapshot.delete(await D.snapshot.get(`surface-ts-img-${RUN}`))
  await D.snapshot.delete(`surface-ts-snap-${RUN}`)
  const names = (await D.snapshot.list()).items.map((s) => s.name)
  assert.ok(!names.includes(`surface-ts-img-${RUN}`) && !names.includes(`surface-ts-snap-${RUN}`))
})
works('VolumeService.create', 'a volume with its name', async () => {
  CTX.volume = await D.volume.create(`surface-ts-vol-${RUN}`)
  assert.equal(CTX.volume.name, `surface-ts-vol-${RUN}`)
})
works('VolumeService.get', 'by name; an unknown name is `DaytonaNotFoundError`', async () => {
  assert.equal((await D.volume.get(`surface-ts-vol-${RUN}`)).id, CTX.volume.id)
  await rejects(D.volume.get(`no-such-${RUN}`), DaytonaNotFoundError)
})
works('VolumeService.list', 'the volume is listed',
  async () => assert.ok((await D.volume.list()).some((v) => v.id === CTX.volume.id)))
works('VolumeService.delete', 'the volume is no longer listed', async () => {
  await D.volume.delete(CTX.volume)
  const deadline = Date.now() + DEADLINE
  while ((await D.volume.list()).some((v) => v.id === CTX.volume.id && v.state !== 'deleted')) {
    assert.ok(Date.now() < deadline)
    await sleep(200)
  }
})
works('SecretService.create', 'a secret with its placeholder', async () => {
  CTX.secret = await D.secret.create({ name: `surface_ts_${RUN}`, value: 'v', hosts: ['a.test'] })
  assert.ok(CTX.secret.placeholder)
})
works('SecretService.get', 'by id; an unknown id is `DaytonaNotFoundError`', async () => {
  assert.equal((await D.secret.get(CTX.secret.id)).name, `surface_ts_${RUN}`)
  await rejects(D.secret.get(randomUUID()), DaytonaNotFoundError)
})
works('SecretService.list', 'the secret is listed by name', async () => {
  assert.deepEqual((await D.secret.list({ name: `surface_ts_${RUN}` })).items.map((s) => s.id), [CTX.secret.id])
})
works('SecretService.update', 'the hosts change', async () => {
  assert.deepEqual((await D.secret.update(CTX.secret.id, { hosts: ['b.test'] })).hosts, ['b.test'])
})
works('SecretService.delete', 'the secret is gone', async () => {
  await D.secret.delete(CTX.secret.id)
  assert.deepEqual((await D.secret.list({ name: `surface_ts_${RUN}` })).items, [])
})
works('WarmPoolService.create', 'a pool of 1 for `base`',
  async () => assert.equal((await D.warmPool.create({ snapshot: 'base', pool: 1 })).pool, 1))
works('WarmPoolService.list', 'the pool is listed',
  async () => assert.ok((await D.warmPool.list()).some((p) => p.snapshot === 'base')))
works('WarmPoolService.update', 'the pool\'s size becomes 2',
  async () => assert.equal((await D.warmPool.update('base', { pool: 2 })).pool, 2))
works('WarmPoolService.delete', 'the pool is no longer listed; an unknown one is `DaytonaNotFoundError`', async () => {
  await D.warmPool.delete('base')
  assert.ok(!(await D.warmPool.list()).some((p) => p.snapshot === 'base'))
  await rejects(D.warmPool.delete('base'), DaytonaNotFoundError)
})

// The end ---------------------------------------------------------------------------------------

works('Sandbox.delete', 'the sandbox is gone: `DaytonaNotFoundError`', async () => {
  await other().delete(SLOW / 1000, true)
  await rejects(D.get(other().id), DaytonaNotFoundError)
}, SLOW)
works('Daytona.delete', 'the sandbox is gone: `DaytonaNotFoundError`', async () => {
  await D.delete(sbx(), SLOW / 1000, true)
  await rejects(D.get(sbx().id), DaytonaNotFoundError)
}, SLOW)

// ---------------------------------------------------------------------------------------------

/** `call()` under `ms`: ['ok', value] | ['raised', error] | ['timeout']. */
async function underDeadline(call, ms) {
  let timer
  const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve(['timeout']), ms) })
  const run = (async () => call())().then((v) => ['ok', v], (e) => ['raised', e])
  const outcome = await Promise.race([run, timeout])
  clearTimeout(timer)
  return outcome
}

function oneLine(text) {
  let t = String(text).split(/\s+/).join(' ').trim().replaceAll('|', '\\|')
  for (const s of [CTX.sbx, CTX.other]) if (s) t = t.replaceAll(s.id, '{id}')
  return t.replaceAll(process.env.DAYTONA_API_URL ?? '\0', '{api}')
}

function render(rows) {
  const count = (c) => [...rows.values()].filter((r) => r[0] === c).length
  const lines = [
    `# \`@daytonaio/sdk\` ${VERSION} (TypeScript) against sandboxd`,
    '',
    `works ${count('works')}, refused ${count('refused')}`,
    '',
    'Generated by `tests/daytona/test_surface.mjs` (run by `crates/sandboxd/tests/daytona_surface.rs`);',
    'edit the script, not this file (`SURFACE_UPDATE=1` rewrites it).',
    '',
    '- Listed by introspection: the methods and accessors on the prototypes of `Daytona`, `Sandbox`,'
    + ' `FileSystem`, `Process`, `PtyHandle`, `Git`, `CodeInterpreter`, `LspServer`, `ComputerUse`, `Mouse`,'
    + ' `Keyboard`, `Screenshot`, `Display`, `RecordingService`, `Accessibility`, `SnapshotService`,'
    + ' `VolumeService`, `SecretService` and `WarmPoolService` (reached from a client and a sandbox), less'
    + ' those the SDK\'s declarations mark `private` or `protected`. Fields (`sandbox.fs`, `daytona.snapshot`)'
    + ' are how the classes are reached, not methods.',
    '- Left out: `Image` (a client-side Dockerfile builder, `tests/daytona/test_images.mjs`) and'
    + ' `ObjectStorage` (the uploader of builds\' local files, `tests/daytona/test_contexts.mjs`).',
    '- Every call runs under a deadline (30 s; creates, start, stop, pause, fork and snapshots 120 s, the'
    + ' first create 300 s); a refused call must raise the SDK\'s `DaytonaError` (or a subclass) within 5 s.',
    '- API version: this SDK speaks Daytona\'s one REST API (`DAYTONA_API_URL`, optional'
    + ' `DAYTONA_ORGANIZATION_ID`, `DAYTONA_TARGET`); it has no `v2` client, project id or'
    + ' `DAYTONA_V2_API_URL` (its only "V2" is the S3 client\'s `ListObjectsV2` in `ObjectStorage`).',
    '',
    '| Class.method | column | what is asserted, or the error and its message |',
    '|---|---|---|',
  ]
  for (const name of [...rows.keys()].sort()) {
    const [column, text] = rows.get(name)
    lines.push(`| \`${name}\` | ${column} | ${text} |`)
  }
  return lines.join('\n') + '\n'
}

function compare(table) {
  mkdirSync(dirname(TABLE), { recursive: true })
  if (process.env.SURFACE_UPDATE === '1') {
    writeFileSync(TABLE, table)
    return true
  }
  const current = existsSync(TABLE) ? readFileSync(TABLE, 'utf8') : ''
  if (current === table) return true
  writeFileSync(`${TABLE}.new`, table)
  console.log(`FAIL the table differs from ${TABLE}: the run's is ${TABLE}.new`)
  return false
}

async function cleanup() {
  for (const s of [CTX.other, CTX.sbx]) if (s) await D.delete(s, SLOW / 1000).catch(() => {})
  for (const n of [`surface-ts-snap-${RUN}`, `surface-ts-img-${RUN}`]) await D.snapshot.delete(n).catch(() => {})
  await D.warmPool.delete('base').catch(() => {})
  for await (const s of D.list({ labels: { surface: RUN } })) await D.delete(s, SLOW / 1000).catch(() => {})
}

async function main() {
  const failures = []
  const rows = new Map()
  let found = null
  try {
    for (const [name, entry] of ENTRIES) {
      if (found && !found.has(name)) continue
      const started = Date.now()
      const [outcome, value] = await underDeadline(entry.call, entry.deadline)
      const took = Date.now() - started
      if (outcome === 'timeout') failures.push(`${name}: no answer within ${entry.deadline / 1000} s`)
      else if (entry.column === 'works' && outcome === 'raised') failures.push(`${name}: ${value?.constructor?.name}: ${value?.message}`)
      else if (entry.column === 'works') rows.set(name, ['works', entry.text])
      else if (outcome === 'ok') failures.push(`${name}: expected to be refused, answered ${JSON.stringify(value)}`)
      else if (!(value instanceof DaytonaError) || !String(value.message).includes(entry.says)) {
        failures.push(`${name}: refused with ${value?.constructor?.name}: ${value?.message}`)
      } else if (took > 5000) failures.push(`${name}: refused only after ${took} ms`)
      else rows.set(name, ['refused', `\`${value.constructor.name}\`: ${oneLine(value.message)}`])
      console.log(`${rows.has(name) ? 'ok  ' : 'FAIL'} ${name}`)
      if (name === 'Daytona.create' && CTX.sbx) {
        CTX.lsp = await sbx().createLspServer('python', '/home/user')
        found = surface()
        for (const n of [...found].sort()) if (!ENTRIES.has(n)) failures.push(`${n}: new method, classify it`)
        for (const n of ENTRIES.keys()) if (!found.has(n)) failures.push(`${n}: an entry for a method the SDK does not have`)
      }
    }
  } finally {
    await cleanup()
  }
  for (const f of failures) console.log('FAIL', f)
  const same = compare(render(rows))
  if (failures.length || !same) {
    console.log(`${failures.length} failures`)
    process.exit(1)
  }
  console.log('surface: ok')
  process.exit(0)
}

await main()
