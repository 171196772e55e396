// Acceptance test: sandboxd's Daytona API through the real, unmodified @daytonaio/sdk (TypeScript).
//
// Create from a snapshot with a name and labels; get by id and by name; list by label; a taken name
// is a conflict; exec with exit codes, cwd and env; files both ways, binary-safe; sessions keeping
// shell state, an async command's logs and its input; a PTY that keeps its shell across
// connections and resizes; previews refused without their token; stop (no process left) and start
// with the files kept; a volume shared by sandboxes, one through a subpath; delete, then not found.
//
// Environment: DAYTONA_API_URL (the daemon's URL + `/api`), DAYTONA_API_KEY (a daemon token). Exit
// status 0 = every check passed. Run by crates/sandboxd/tests/daytona_files.rs.

import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { Daytona, DaytonaConflictError, DaytonaNotFoundError } from '@daytonaio/sdk'

const RUN = randomBytes(4).toString('hex')
const daytona = new Daytona()
const made = []

async function create(params) {
  const sandbox = await daytona.create({ snapshot: 'base', ...params })
  made.push(sandbox)
  return sandbox
}

/** GET `url` through the daemon's listener with its host in the Host header (no DNS needed). */
async function fetchPreview(url, headers = {}) {
  const daemon = new URL(process.env.DAYTONA_API_URL)
  const target = new URL(url)
  const http = await import('node:http')
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: daemon.hostname, port: daemon.port, path: target.pathname + target.search, headers: { host: target.host, ...headers } },
      (res) => {
        let body = ''
        res.on('data', (c) => (body += c))
        res.on('end', () => resolve({ status: res.statusCode, body }))
      },
    )
    req.on('error', reject)
    req.end()
  })
}

async function until(what, check, ms = 10000) {
  const deadline = Date.now() + ms
  for (;;) {
    if (await check()) return
    assert.ok(Date.now() < deadline, `${what}: not within ${ms} ms`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

const tests = {
  async createGetListAndNames() {
    const name = `ts-${RUN}`
    const sandbox = await create({ name, labels: { suite: RUN } })
    assert.equal(sandbox.state, 'started')
    assert.equal((await daytona.get(sandbox.id)).name, name)
    assert.equal((await daytona.get(name)).id, sandbox.id)
    const listed = []
    for await (const s of daytona.list({ labels: { suite: RUN } })) listed.push(s.id)
    assert.deepEqual(listed, [sandbox.id])
    await assert.rejects(create({ name }), DaytonaConflictError)
  },

  async execAndFiles() {
    const sandbox = await create({})
    assert.equal(await sandbox.getWorkDir(), '/home/user')
    const ok = await sandbox.process.executeCommand('echo $GREETING from $(pwd)', '/tmp', { GREETING: 'hi' })
    assert.equal(ok.exitCode, 0)
    assert.equal(ok.result.trim(), 'hi from /tmp')
    assert.equal((await sandbox.process.executeCommand('exit 7')).exitCode, 7)
    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i))
    await sandbox.fs.uploadFile(bytes, '/tmp/all-bytes.bin')
    assert.deepEqual(await sandbox.fs.downloadFile('/tmp/all-bytes.bin'), bytes)
    const size = await sandbox.process.executeCommand('stat -c %s /tmp/all-bytes.bin')
    assert.equal(size.result.trim(), '256')
  },

  async sessionsKeepStateAndTakeInput() {
    const sandbox = await create({})
    await sandbox.process.createSession('work')
    await sandbox.process.executeSessionCommand('work', { command: 'cd /tmp && export KEPT=yes' })
    const same = await sandbox.process.executeSessionCommand('work', { command: 'pwd; echo $KEPT' })
    assert.equal(same.exitCode, 0)
    assert.equal(same.stdout ?? same.output, '/tmp\nyes\n')
    const asking = await sandbox.process.executeSessionCommand('work', {
      command: 'read -r who; echo "hello $who"',
      runAsync: true,
    })
    await sandbox.process.sendSessionCommandInput('work', asking.cmdId, 'typescript\n')
    await until('the command ends', async () => (await sandbox.process.getSessionCommand('work', asking.cmdId)).exitCode !== undefined && (await sandbox.process.getSessionCommand('work', asking.cmdId)).exitCode !== null)
    const logs = await sandbox.process.getSessionCommandLogs('work', asking.cmdId)
    assert.equal(logs.stdout, 'hello typescript\n')
    await sandbox.process.deleteSession('work')
    await assert.rejects(sandbox.process.getSession('work'), DaytonaNotFoundError)
  },

  async ptyKeepsItsShellAndResizes() {
    const sandbox = await create({})
    let seen = ''
    const onData = (data) => {
      seen += new TextDecoder().decode(data)
    }
    const pty = await sandbox.process.createPty({ id: 'term', cwd: '/tmp', envs: { WHO: 'ts-pty' }, cols: 100, rows: 30, onData })
    await pty.waitForConnection()
    await pty.sendInput('echo "$WHO in $(pwd)"; stty size\n')
    await until('the PTY answers', () => seen.includes('ts-pty in /tmp') && seen.includes('30 100'))
    const resized = await sandbox.process.resizePtySession('term', 120, 40)
    assert.equal(resized.cols, 120)
    await pty.sendInput('stty size; export KEPT=still\n')
    await until('the resize shows', () => seen.includes('40 120'))
    await pty.disconnect()
    const listed = await sandbox.process.listPtySessions()
    assert.deepEqual(listed.map((s) => [s.id, s.active]), [['term', true]])
    seen = ''
    const again = await sandbox.process.connectPty('term', { onData })
    await again.waitForConnection()
    await again.sendInput('echo $KEPT; exit 5\n')
    const result = await again.wait()
    assert.equal(result.exitCode, 5)
    assert.ok(seen.includes('still'), seen)
    assert.equal((await sandbox.process.getPtySessionInfo('term')).active, false)
    await sandbox.process.killPtySession('term')
    assert.deepEqual(await sandbox.process.listPtySessions(), [])
  },

  async previewsNeedTheirToken() {
    const sandbox = await create({})
    await sandbox.process.executeCommand('mkdir -p /tmp/site && echo ts-preview > /tmp/site/index.html')
    await sandbox.process.executeCommand('cd /tmp/site && (nohup python3 -m http.server 8000 >/dev/null 2>&1 &)')
    const link = await sandbox.getPreviewLink(8000)
    const withToken = { 'x-daytona-preview-token': link.token }
    await until('the server answers', async () => (await fetchPreview(link.url, withToken)).status === 200)
    assert.equal((await fetchPreview(link.url, withToken)).body, 'ts-preview\n')
    assert.equal((await fetchPreview(link.url)).status, 401)
    const signed = await sandbox.getSignedPreviewUrl(8000, 60)
    assert.equal((await fetchPreview(signed.url)).status, 200)
    await sandbox.expireSignedPreviewUrl(8000, signed.token)
    assert.equal((await fetchPreview(signed.url)).status, 401)
  },

  async stopEndsProcessesAndStartKeepsFiles() {
    const sandbox = await create({})
    await sandbox.fs.uploadFile(Buffer.from('kept\n'), '/home/user/kept.txt')
    await sandbox.process.executeCommand('(nohup sleep 600 >/dev/null 2>&1 &)')
    await sandbox.stop()
    assert.equal(sandbox.state, 'stopped')
    await sandbox.start()
    assert.equal(sandbox.state, 'started')
    assert.equal((await sandbox.fs.downloadFile('/home/user/kept.txt')).toString(), 'kept\n')
    assert.equal((await sandbox.process.executeCommand('pgrep -x sleep')).exitCode, 1)
  },

  async volumesPersistAndMountASubpath() {
    const name = `ts-vol-${RUN}`
    const volume = await daytona.volume.get(name, true)
    assert.equal(volume.name, name)
    assert.equal(volume.state, 'ready')
    assert.ok((await daytona.volume.list()).some((v) => v.id === volume.id))
    const whole = await create({ labels: { suite: RUN }, volumes: [{ volumeId: volume.id, mountPath: '/mnt/whole' }] })
    const part = await create({
      labels: { suite: RUN },
      volumes: [{ volumeId: name, mountPath: '/mnt/part', subpath: 'projects/b' }],
    })
    assert.equal((await part.process.executeCommand('echo from-ts > /mnt/part/f && echo ok')).result.trim(), 'ok')
    assert.equal((await whole.process.executeCommand('cat /mnt/whole/projects/b/f')).result.trim(), 'from-ts')
    await assert.rejects(daytona.volume.delete(volume), (e) => /mounted/.test(`${e}`))
    await whole.delete()
    await part.delete()
    const later = await create({ labels: { suite: RUN }, volumes: [{ volumeId: volume.id, mountPath: '/data' }] })
    assert.equal((await later.process.executeCommand('cat /data/projects/b/f')).result.trim(), 'from-ts')
    await later.delete()
    await until('the volume is deleted', () => daytona.volume.delete(volume).then(() => true, () => false), 15000)
    await assert.rejects(daytona.volume.get(name), DaytonaNotFoundError)
  },

  async deleteThenNotFound() {
    const sandbox = await daytona.create({ snapshot: 'base' })
    await sandbox.delete()
    await assert.rejects(daytona.get(sandbox.id), DaytonaNotFoundError)
  },
}

let failed = 0
const only = process.argv.slice(2)
for (const [name, test] of Object.entries(tests)) {
  if (only.length && !only.includes(name)) continue
  try {
    await test()
    console.log(`ok   ${name}`)
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
