#!/usr/bin/env python3
"""Acceptance test: the code interpreter through the real, unmodified `e2b-code-interpreter` SDK.

Environment as for test_sdk.py (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). Exit status 0 = every
check passed. Run by crates/sandboxd/tests/code_interpreter.rs, once the daemon's
code-interpreter-v1 template is built.
"""

import sys
import time
import traceback
import uuid

from e2b import NotFoundException, SandboxException, TimeoutException
from e2b_code_interpreter import Sandbox

RUN = uuid.uuid4().hex[:8]
SBX = None


def sandbox():
    global SBX
    if SBX is None:
        # A unique metadata value: identical create bodies within 10 s share one sandbox.
        SBX = Sandbox.create(metadata={"suite": "interpreter-py", "run": RUN})
    return SBX


def test_state_is_kept_between_calls():
    sbx = sandbox()
    assert sbx.run_code("x = 1 + 1\nx").text == "2"
    execution = sbx.run_code("x + 1")
    assert execution.text == "3", execution
    assert execution.execution_count and execution.execution_count >= 2, execution


def test_output_reaches_logs_and_callbacks():
    seen_out, seen_err = [], []
    execution = sandbox().run_code(
        "import sys\nprint('to out')\nprint('to err', file=sys.stderr)",
        on_stdout=lambda m: seen_out.append(m.line),
        on_stderr=lambda m: seen_err.append(m.line),
    )
    assert execution.logs.stdout == ["to out\n"], execution.logs
    assert execution.logs.stderr == ["to err\n"], execution.logs
    assert seen_out == ["to out\n"] and seen_err == ["to err\n"], (seen_out, seen_err)
    assert execution.error is None


def test_an_exception_is_an_error_with_its_traceback():
    errors = []
    execution = sandbox().run_code("def f():\n    return 1/0\nf()", on_error=errors.append)
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError", execution.error
    assert execution.error.value == "division by zero", execution.error
    assert "ZeroDivisionError" in execution.error.traceback and "f()" in execution.error.traceback
    assert errors and errors[0].name == "ZeroDivisionError"


def test_a_plot_is_a_png_and_a_chart():
    execution = sandbox().run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9], label='squares')\n"
        "plt.title('Squares')\nplt.xlabel('n')\nplt.ylabel('n*n')\nplt.show()"
    )
    assert len(execution.results) == 1, execution.results
    result = execution.results[0]
    assert result.png and result.png.startswith("iVBOR"), "the PNG is base64"
    chart = result.chart
    assert chart is not None and chart.type == "line", chart
    assert chart.title == "Squares" and chart.x_label == "n" and chart.y_label == "n*n"
    assert chart.elements[0].label == "squares"
    assert chart.elements[0].points == [(1.0, 1.0), (2.0, 4.0), (3.0, 9.0)], chart.elements[0].points


def test_a_plot_shows_whatever_backend_the_code_picked():
    # Generated code often selects Agg before plotting, where `plt.show()` shows nothing: the figure
    # still comes back as a PNG and a chart, every time, whether Agg was picked before pyplot was
    # imported or after (each in a fresh kernel), and a figure is shown once.
    sbx = sandbox()
    plot = "plt.plot([1, 2, 3], [2, 4, 8], label='doubling')\nplt.show()\n"
    for setup in [
        "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n",
        "import matplotlib.pyplot as plt\nimport matplotlib\nmatplotlib.use('Agg')\n",
    ]:
        ctx = sbx.create_code_context()
        try:
            for attempt in range(3):
                execution = sbx.run_code(setup + plot, context=ctx)
                assert execution.error is None, execution.error
                pngs = [r for r in execution.results if r.png]
                assert len(pngs) == 1, (setup, attempt, execution.results)
                assert pngs[0].png.startswith("iVBOR"), "the PNG is base64"
                chart = pngs[0].chart
                assert chart is not None and chart.type == "line", (setup, attempt, chart)
                assert chart.elements[0].label == "doubling", chart.elements
            # Nothing is left open to be shown again.
            assert sbx.run_code("1 + 1", context=ctx).results[0].text == "2"
            assert [r for r in sbx.run_code("2", context=ctx).results if r.png] == []
        finally:
            sbx.remove_code_context(ctx)


def test_a_bar_chart_names_its_bars():
    execution = sandbox().run_code(
        "import matplotlib.pyplot as plt\nplt.bar(['apples', 'pears'], [3, 5])\nplt.show()"
    )
    chart = execution.results[0].chart
    assert chart is not None and chart.type == "bar", chart
    assert [(b.label, b.value) for b in chart.elements] == [("apples", 3.0), ("pears", 5.0)]


def test_a_dataframe_is_html():
    execution = sandbox().run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    result = execution.results[0]
    assert result.is_main_result
    assert "<table" in result.html and "dataframe" in result.html, result.html
    assert "a" in result.text and "b" in result.text


def test_envs_hold_for_one_execution():
    sbx = sandbox()
    assert sbx.run_code("import os\nos.environ.get('GREETING')", envs={"GREETING": "hi"}).text == "'hi'"
    assert sbx.run_code("os.environ.get('GREETING')").text is None
    execution = sbx.run_code("echo \"[$GREETING]\"", language="bash", envs={"GREETING": "yo"})
    assert execution.logs.stdout == ["[yo]\n"], execution.logs


def test_bash_runs_and_keeps_its_shell_state():
    sbx = sandbox()
    sbx.run_code("cd /tmp && export KEPT=1", language="bash")
    execution = sbx.run_code("pwd; echo $KEPT", language="bash")
    assert execution.logs.stdout == ["/tmp\n", "1\n"] or "".join(execution.logs.stdout) == "/tmp\n1\n", execution.logs


def test_contexts_are_separate_and_can_be_restarted_and_removed():
    sbx = sandbox()
    ctx = sbx.create_code_context(cwd="/tmp")
    assert ctx.language == "python" and ctx.cwd == "/tmp", ctx
    sbx.run_code("secret = 42", context=ctx)
    assert sbx.run_code("secret", context=ctx).text == "42"
    assert sbx.run_code("import os\nos.getcwd()", context=ctx).text == "'/tmp'"
    assert sbx.run_code("'secret' in globals()").text == "False", "the default context is another kernel"
    assert ctx.id in [c.id for c in sbx.list_code_contexts()]
    sbx.restart_code_context(ctx)
    assert sbx.run_code("secret", context=ctx).error.name == "NameError"
    sbx.remove_code_context(ctx)
    assert ctx.id not in [c.id for c in sbx.list_code_contexts()]
    try:
        sbx.run_code("1", context=ctx)
        raise AssertionError("a removed context ran code")
    except NotFoundException:
        pass


def test_unsupported_languages_are_refused_naming_the_supported_ones():
    try:
        sandbox().run_code("1", language="r")
        raise AssertionError("r ran")
    except SandboxException as e:
        assert "400" in str(e), e


def test_a_timeout_interrupts_and_the_next_call_works():
    sbx = sandbox()
    sbx.run_code("kept = 'yes'")
    started = time.monotonic()
    try:
        sbx.run_code("import time\ntime.sleep(60)", timeout=2)
        raise AssertionError("no timeout")
    except TimeoutException:
        pass
    assert time.monotonic() - started < 10
    started = time.monotonic()
    execution = sbx.run_code("kept")
    # The interrupted sleep ended (KeyboardInterrupt), so this ran at once with the state intact.
    assert execution.text == "'yes'", execution
    assert time.monotonic() - started < 10, "the kernel was not interrupted"


def test_commands_still_work_in_the_template():
    result = sandbox().commands.run("python -c 'import pandas, numpy; print(numpy.__name__)'")
    assert result.exit_code == 0 and result.stdout.strip() == "numpy", result


def test_a_snapshot_keeps_files_and_runs_the_interpreter():
    sbx = sandbox()
    sbx.files.write("/home/user/kept.txt", "from before")
    snapshot = sbx.create_snapshot()
    copy = Sandbox.create(snapshot.snapshot_id, metadata={"suite": "interpreter-py", "run": RUN, "copy": "1"})
    try:
        execution = copy.run_code("open('/home/user/kept.txt').read()")
        assert execution.text == "'from before'", execution
    finally:
        copy.kill()
        Sandbox.delete_snapshot(snapshot.snapshot_id)


def main():
    tests = [v for k, v in globals().items() if k.startswith("test_") and callable(v)]
    only = sys.argv[1:]
    failed = []
    try:
        for test in tests:
            if only and test.__name__ not in only:
                continue
            try:
                test()
                print(f"ok   {test.__name__}", flush=True)
            except Exception:
                failed.append(test.__name__)
                print(f"FAIL {test.__name__}", flush=True)
                traceback.print_exc()
    finally:
        if SBX is not None:
            SBX.kill()
    if failed:
        print(f"{len(failed)} failed: {failed}")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
