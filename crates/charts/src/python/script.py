# Runs a script in a fresh Python process, after charts.py, as `python3 -u -c <this> MARK CODE ARG...`:
# the code runs as `__main__` with `sys.argv == ["-", ARG...]`, as `python3 -u -` would run it.
#
# Figures come back as charts whatever backend the code picked: unless the environment names a
# backend other than the inline one (a kernel's), matplotlib's is one of ours whose `show()` writes each open figure to standard output
# as one line, MARK then the chart as JSON (with its PNG, base64, under "png"), and closes it.
# Figures still open when the code ends (shown or not, under any backend) are written the same
# way. A traceback leaves out this runner's own frame; the exit code is Python's (1 for an
# uncaught exception, SystemExit's own code).


def __sandboxd_run():
    import sys

    mark, code = sys.argv[1], sys.argv[2]
    sys.argv = ["-"] + sys.argv[3:]
    figure_chart = __sandboxd_chart_tools()

    def write_open_figures():
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        import base64
        import io
        import json

        from matplotlib._pylab_helpers import Gcf

        for manager in Gcf.get_all_fig_managers():
            fig = manager.canvas.figure
            try:
                chart = figure_chart(fig) or {"type": "unknown", "title": None, "elements": []}
            except Exception:
                chart = {"type": "unknown", "title": None, "elements": []}
            png = io.BytesIO()
            try:
                fig.savefig(png, format="png", bbox_inches="tight")
                chart["png"] = base64.b64encode(png.getvalue()).decode("ascii")
            except Exception:
                pass
            sys.stdout.write(mark + json.dumps(chart) + "\n")
            sys.stdout.flush()
        pyplot.close("all")

    import importlib.abc
    import importlib.util
    import os

    class ShowBackend(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        """The `module://sandboxd_show` backend: Agg's canvas, and a `show()` that writes."""

        def find_spec(self, name, path=None, target=None):
            return importlib.util.spec_from_loader(name, self) if name == "sandboxd_show" else None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            module.FigureCanvas = FigureCanvasAgg
            module.show = lambda *args, **kwargs: write_open_figures()

    sys.meta_path.append(ShowBackend())
    # An image made for the interpreter names the inline backend, which shows nothing outside a
    # kernel: ours takes its place.
    if "inline" in os.environ.get("MPLBACKEND", "inline"):
        os.environ["MPLBACKEND"] = "module://sandboxd_show"

    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    try:
        exec(compile(code, "<stdin>", "exec"), main.__dict__)
    except SystemExit:
        write_open_figures()
        raise
    except BaseException as e:
        write_open_figures()
        import traceback

        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        sys.stderr.flush()
        raise SystemExit(1) from None
    write_open_figures()


__sandboxd_run()
