# Run silently in every new Python kernel by the sandboxd agent's interpreter.
#
# Registers a display formatter that describes a matplotlib figure as a chart (E2B's `chart`
# result field: line, scatter, bar and pie charts, and a "superchart" of several axes). The agent
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

    def number(v):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return str(v)
        return f if f == f else None

    def text(t):
        s = t.get_text() if t is not None else ""
        return s or None

    def axis_info(ax, name):
        axis = getattr(ax, name + "axis")
        ticks = [number(t) for t in axis.get_ticklocs()]
        labels = [t.get_text() for t in axis.get_ticklabels()]
        scale = axis.get_scale()
        converter = axis.get_converter() if hasattr(axis, "get_converter") else axis.converter
        if type(converter).__name__ == "StrCategoryConverter":
            scale = "categorical"
        return {
            name + "_label": text(axis.label),
            name + "_unit": None,
            name + "_ticks": ticks,
            name + "_tick_labels": labels,
            name + "_scale": scale,
        }

    def label_of(artist, default):
        label = artist.get_label()
        return default if not label or label.startswith("_") else label

    def axes_chart(ax):
        from matplotlib.collections import PathCollection
        from matplotlib.container import BarContainer
        from matplotlib.patches import Wedge

        title = text(ax.title)
        wedges = [p for p in ax.patches if isinstance(p, Wedge)]
        if wedges:
            return {
                "type": "pie",
                "title": title,
                "elements": [
                    {"label": label_of(w, str(i)), "angle": number(abs(w.theta2 - w.theta1)), "radius": number(w.r)}
                    for i, w in enumerate(wedges)
                ],
            }
        info = {**axis_info(ax, "x"), **axis_info(ax, "y")}
        bars = [c for c in ax.containers if isinstance(c, BarContainer)]
        if bars:
            ticks = {round(t, 6): l for t, l in zip(info["x_ticks"], info["x_tick_labels"]) if isinstance(t, float)}
            elements = []
            for c in bars:
                group = label_of(c, "")
                for r in c.patches:
                    x = r.get_x() + r.get_width() / 2
                    elements.append({"label": ticks.get(round(x, 6)) or str(number(x)), "value": number(r.get_height()), "group": group})
            return {"type": "bar", "title": title, "x_label": info["x_label"], "y_label": info["y_label"],
                    "x_unit": None, "y_unit": None, "elements": elements}
        scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
        lines = [l for l in ax.get_lines() if len(l.get_xdata()) > 0]
        if scatters and not lines:
            elements = [
                {"label": label_of(c, str(i)), "points": [[number(x), number(y)] for x, y in c.get_offsets()]}
                for i, c in enumerate(scatters)
            ]
            return {"type": "scatter", "title": title, **info, "elements": elements}
        if lines:
            elements = [
                {"label": label_of(l, str(i)), "points": [[number(x), number(y)] for x, y in zip(l.get_xdata(), l.get_ydata())]}
                for i, l in enumerate(lines)
            ]
            return {"type": "line", "title": title, **info, "elements": elements}
        return {"type": "unknown", "title": title, "elements": []}

    def figure_chart(fig):
        try:
            fig.canvas.draw()
        except Exception:
            pass
        axes = [ax for ax in fig.get_axes() if ax.has_data()]
        if not axes:
            return None
        charts = [axes_chart(ax) for ax in axes]
        if len(charts) == 1:
            return charts[0]
        suptitle = getattr(fig, "_suptitle", None)
        return {"type": "superchart", "title": text(suptitle), "elements": charts}

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
del __sandboxd_setup
