// Acceptance test: builds with local files through the real, unmodified @daytonaio/sdk
// (TypeScript): `addLocalFile` and `addLocalDir` upload their files to the daemon's object store
// (over https, with the AWS SDK's client: a listing, then a multipart upload of a 6 MiB tree)
// and the sandbox built from the image has them, byte for byte; the same files again are found by
// the listing and not uploaded again.
//
// Environment: DAYTONA_API_URL (the daemon's URL + `/api`, by a host name the daemon's TLS listener
// has a certificate for), DAYTONA_API_KEY (a daemon token), NODE_EXTRA_CA_CERTS (that
// certificate's CA); the daemon pulls `team/app:v1` (a busybox image) through a registry mirror.
// Exit status 0 = every check passed. Run by crates/sandboxd/tests/daytona_contexts.rs.

import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Daytona, Image } from '@daytonaio/sdk'

const RUN = randomBytes(4).toString('hex')
const daytona = new Daytona()
const made = []
const work = mkdtempSync(join(tmpdir(), 'daytona-ctx-ts-'))
const one = join(work, 'one.txt')
const tree = join(work, 'tree')
const blob = randomBytes(6 * 1024 * 1024)
writeFileSync(one, `ts one ${RUN}\n`)
mkdirSync(join(tree, 'sub'), { recursive: true })
writeFileSync(join(tree, 'sub', 'c.txt'), 'c below\n')
writeFileSync(join(tree, 'blob.bin'), blob)

async function run(sandbox, command) {
  const out = await sandbox.process.executeCommand(command)
  assert.equal(out.exitCode, 0, `${command}: ${out.result}`)
  return out.result.trim()
}

const tests = {
  async fromAnImageWithLocalFiles() {
    const image = Image.base('team/app:v1').addLocalFile(one, '/opt/one.txt').addLocalDir(tree, '/opt/tree')
    const sandbox = await daytona.create({ image, labels: { contexts: RUN } }, { timeout: 300 })
    made.push(sandbox)
    assert.equal(sandbox.state, 'started')
    assert.equal(await run(sandbox, 'cat /opt/one.txt'), `ts one ${RUN}`)
    assert.equal(await run(sandbox, 'cat /opt/tree/sub/c.txt'), 'c below')
    const digest = (await run(sandbox, 'sha256sum /opt/tree/blob.bin')).split(' ')[0]
    assert.equal(digest, createHash('sha256').update(blob).digest('hex'))
  },

  async theSameFilesAreNotUploadedAgain() {
    // The listing finds the uploaded context; the build is the one made already.
    const image = Image.base('team/app:v1').addLocalFile(one, '/opt/one.txt').addLocalDir(tree, '/opt/tree')
    const sandbox = await daytona.create({ image, labels: { contexts: RUN } }, { timeout: 300 })
    made.push(sandbox)
    assert.equal(await run(sandbox, 'cat /opt/one.txt'), `ts one ${RUN}`)
  },
}

let failed = 0
try {
  for (const [name, test] of Object.entries(tests)) {
    try {
      await test()
      console.log(`ok   ${name}`)
    } catch (e) {
      failed++
      console.log(`FAIL ${name}`)
      console.log(e)
    }
  }
} finally {
  for (const sandbox of made) {
    await daytona.delete(sandbox).catch(() => {})
  }
}
if (failed) {
  console.log(`${failed} failed`)
  process.exit(1)
}
console.log('all passed')
process.exit(0)
