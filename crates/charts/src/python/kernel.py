# Run silently in every new Python kernel by the sandboxd agent's interpreter, after charts.py.
#
# Registers a display formatter that describes a matplotlib figure as a chart (charts.py). The agent
# forwards the description, which travels in the figure's MIME bundle under
# application/vnd.sandboxd.chart+json, next to the PNG the inline backend renders.
#
# And shows figures whatever backend the code picked: the inline backend shows every open figure at
# the end of a cell, but code that selects another one (`matplotlib.use("agg")`, common in generated
# code) would show nothing, `plt.show()` being a no-op there. After each cell, the figures still open
# under such a backend are rendered here the same way (PNG and chart) and closed.


def __sandboxd_setup():
    import sys

    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    shell = get_ipython()
    if shell is None:
        return
    figure_chart = __sandboxd_chart_tools()

    class ChartFormatter(BaseFormatter):
        """Figures only, by type check rather than a registered printer: the inline backend removes
        every formatter's printers for Figure when it is activated."""

        format_type = Unicode("application/vnd.sandboxd.chart+json")
        print_method = ObjectName("_repr_sandboxd_chart_")
        _return_type = (dict,)

        def __call__(self, obj):
            figure = sys.modules.get("matplotlib.figure")
            if not self.enabled or figure is None or not isinstance(obj, figure.Figure):
                return None
            try:
                return figure_chart(obj)
            except Exception:
                return None

    formatter = ChartFormatter(parent=shell.display_formatter)
    shell.display_formatter.formatters[formatter.format_type] = formatter

    def show_figures_of_other_backends():
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        import matplotlib

        # The backend in use, without resolving one where none was picked yet (matplotlib >= 3.8).
        current = getattr(matplotlib.rcParams, "_get_backend_or_none", matplotlib.get_backend)
        if "inline" in str(current() or ""):
            return  # the inline backend shows its figures itself
        import base64
        import io

        from IPython.display import display
        from matplotlib._pylab_helpers import Gcf

        for manager in Gcf.get_all_fig_managers():
            fig = manager.canvas.figure
            png = io.BytesIO()
            try:
                fig.savefig(png, format="png", bbox_inches="tight")
            except Exception:
                continue
            bundle = {
                "image/png": base64.b64encode(png.getvalue()).decode("ascii"),
                "text/plain": repr(fig),
            }
            try:
                chart = figure_chart(fig)
            except Exception:
                chart = None
            if chart:
                bundle[formatter.format_type] = chart
            display(bundle, raw=True)
        pyplot.close("all")

    shell.events.register("post_execute", show_figures_of_other_backends)


__sandboxd_setup()
del __sandboxd_setup, __sandboxd_chart_tools
