// Acceptance test: the code interpreter through the real, unmodified `@e2b/code-interpreter` JS SDK.
// Environment as for test_sdk.mjs; exit status 0 when every check passed. Run by
// crates/sandboxd/tests/code_interpreter.rs, once the daemon's code-interpreter-v1 template is built.

import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { NotFoundError, Sandbox, TimeoutError } from '@e2b/code-interpreter'

const sbx = await Sandbox.create({ metadata: { suite: 'interpreter-js', run: randomUUID() } })

async function stateOutputAndErrors() {
  assert.equal((await sbx.runCode('x = 1 + 1\nx')).text, '2')
  assert.equal((await sbx.runCode('x * 10')).text, '20')
  const out = []
  const execution = await sbx.runCode('print("hello")\n1/0', { onStdout: (m) => out.push(m.line) })
  assert.deepEqual(execution.logs.stdout, ['hello\n'])
  assert.deepEqual(out, ['hello\n'])
  assert.equal(execution.error.name, 'ZeroDivisionError')
  assert.match(execution.error.traceback, /ZeroDivisionError/)
}

async function resultsAndCharts() {
  const plot = await sbx.runCode(
    'import matplotlib.pyplot as plt\nplt.pie([1, 3], labels=["a", "b"])\nplt.show()',
  )
  assert.equal(plot.results.length, 1)
  assert.ok(plot.results[0].png.startsWith('iVBOR'))
  assert.equal(plot.results[0].chart.type, 'pie')
  assert.deepEqual(plot.results[0].chart.elements.map((e) => e.label), ['a', 'b'])
  const frame = await sbx.runCode('import pandas as pd\npd.DataFrame({"n": [1, 2]})')
  assert.match(frame.results[0].html, /<table/)
}

// Generated code often selects Agg before plotting, where `plt.show()` shows nothing: the figure still
// comes back as a PNG and a chart, every time, whether Agg was picked before pyplot was imported or
// after (each in a fresh context), and a figure is shown once.
async function aPlotShowsWhateverBackendTheCodePicked() {
  const plot = "plt.plot([1, 2, 3], [2, 4, 8], label='doubling')\nplt.show()\n"
  for (const setup of [
    "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n",
    "import matplotlib.pyplot as plt\nimport matplotlib\nmatplotlib.use('Agg')\n",
  ]) {
    const context = await sbx.createCodeContext()
    try {
      for (let attempt = 0; attempt < 3; attempt++) {
        const execution = await sbx.runCode(setup + plot, { context })
        assert.equal(execution.error, undefined, JSON.stringify(execution.error))
        const pngs = execution.results.filter((r) => r.png)
        assert.equal(pngs.length, 1, JSON.stringify({ setup, attempt, results: execution.results.length }))
        assert.ok(pngs[0].png.startsWith('iVBOR'), 'the PNG is base64')
        assert.equal(pngs[0].chart?.type, 'line', JSON.stringify({ setup, attempt }))
        assert.equal(pngs[0].chart.elements[0].label, 'doubling')
      }
      // Nothing is left open to be shown again.
      assert.equal((await sbx.runCode('1 + 1', { context })).text, '2')
      assert.deepEqual((await sbx.runCode('2', { context })).results.filter((r) => r.png), [])
    } finally {
      await sbx.removeCodeContext(context)
    }
  }
}

async function envsBashAndContexts() {
  const env = await sbx.runCode('import os\nos.environ["WHO"]', { envs: { WHO: 'js' } })
  assert.equal(env.text, "'js'")
  const bash = await sbx.runCode('echo $((6 * 7))', { language: 'bash' })
  assert.deepEqual(bash.logs.stdout, ['42\n'])
  const ctx = await sbx.createCodeContext({ cwd: '/tmp' })
  assert.equal(ctx.cwd, '/tmp')
  await sbx.runCode('mine = "ctx"', { context: ctx })
  assert.equal((await sbx.runCode('mine', { context: ctx })).text, "'ctx'")
  assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id))
  await sbx.restartCodeContext(ctx)
  assert.equal((await sbx.runCode('mine', { context: ctx })).error.name, 'NameError')
  await sbx.removeCodeContext(ctx)
  await assert.rejects(sbx.runCode('1', { context: ctx }), NotFoundError)
}

async function timeoutInterrupts() {
  await assert.rejects(sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 2000 }), TimeoutError)
  const started = Date.now()
  assert.equal((await sbx.runCode('x')).text, '2')
  assert.ok(Date.now() - started < 10_000, 'the kernel was not interrupted')
}

let failed = 0
try {
  for (const test of [
    stateOutputAndErrors, resultsAndCharts, aPlotShowsWhateverBackendTheCodePicked, envsBashAndContexts,
    timeoutInterrupts,
  ]) {
    try {
      const started = Date.now()
      await test()
      console.log(`ok   ${test.name} (${Date.now() - started} ms)`)
    } catch (e) {
      failed += 1
      console.log(`FAIL ${test.name}`)
      console.log(e)
    }
  }
} finally {
  await sbx.kill()
}
if (failed) {
  console.log(`${failed} failed`)
  process.exit(1)
}
console.log('all passed')
// The SDK leaves a request timer pending after an error answer (the removed context's 404), which
// would keep node alive for its request timeout.
process.exit(0)
