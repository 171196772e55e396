# Describes a matplotlib figure as a chart: line, scatter, bar and pie charts, and a
# "superchart" of several axes (E2B's `chart` result field, Daytona's `charts` artifacts).
#
# Defines one function, __sandboxd_chart_tools(), that returns `figure_chart(fig)` (a dict, or
# None for a figure without data); the code placed after this file calls it and deletes it, so
# nothing is left in the namespace the user's code runs in.


def __sandboxd_chart_tools():
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

    return figure_chart
