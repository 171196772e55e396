//! matplotlib figures as chart descriptions (E2B's `chart` result field, Daytona's `charts`
//! artifacts), made by Python that runs inside a sandbox:
//!
//! - [`KERNEL_SETUP`] runs silently in each of the interpreter's Python kernels: a display
//!   formatter adds the chart to a figure's MIME bundle, and figures left open under a backend
//!   other than the inline one are shown after each cell.
//! - [`SCRIPT_RUNNER`] runs a script in a fresh process (`python3 -u -c SCRIPT_RUNNER MARK CODE
//!   ARG...`), writing each figure the script shows, or leaves open, to standard output as one
//!   line that starts with `MARK`; [`split_charts`] takes those lines back out.
//!
//! Both start with the same chart description (`python/charts.py`), so a figure is described the
//! same way on every surface.

use serde_json::Value;

/// The Python each interpreter kernel runs silently when it starts.
pub const KERNEL_SETUP: &str = concat!(
    include_str!("python/charts.py"),
    "\n",
    include_str!("python/kernel.py")
);

/// The Python a fresh process runs a script with (`python3 -u -c SCRIPT_RUNNER MARK CODE ARG...`).
pub const SCRIPT_RUNNER: &str = concat!(
    include_str!("python/charts.py"),
    "\n",
    include_str!("python/script.py")
);

/// A script's output without the chart lines [`SCRIPT_RUNNER`] wrote into it, and those charts in
/// order. A chart line runs from `mark` to the next newline (included), wherever on a line the
/// mark starts, so output the script wrote without a newline before it is kept whole; a line
/// whose JSON does not parse stays in the output as it was.
pub fn split_charts(output: &str, mark: &str) -> (String, Vec<Value>) {
    if mark.is_empty() {
        return (output.to_string(), Vec::new());
    }
    let (mut text, mut charts) = (String::with_capacity(output.len()), Vec::new());
    let mut rest = output;
    while let Some(at) = rest.find(mark) {
        let after = &rest[at + mark.len()..];
        let (json, next) = match after.find('\n') {
            Some(end) => (&after[..end], &after[end + 1..]),
            None => (after, ""),
        };
        match serde_json::from_str::<Value>(json) {
            Ok(chart) if chart.is_object() => {
                text.push_str(&rest[..at]);
                charts.push(chart);
                rest = next;
            }
            _ => {
                let kept = at + mark.len();
                text.push_str(&rest[..kept]);
                rest = &rest[kept..];
            }
        }
    }
    text.push_str(rest);
    (text, charts)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARK: &str = "\u{1e}chart-1f:";

    #[test]
    fn chart_lines_leave_the_output_in_order() {
        let out = format!("a\n{MARK}{{\"type\":\"line\"}}\nb\n{MARK}{{\"type\":\"bar\"}}\n");
        let (text, charts) = split_charts(&out, MARK);
        assert_eq!(text, "a\nb\n");
        assert_eq!(charts.len(), 2);
        assert_eq!(charts[0]["type"], "line");
        assert_eq!(charts[1]["type"], "bar");
    }

    #[test]
    fn output_without_a_newline_before_the_mark_is_kept_whole() {
        let out = format!("no newline{MARK}{{\"type\":\"pie\"}}\nthen more");
        let (text, charts) = split_charts(&out, MARK);
        assert_eq!(text, "no newlinethen more");
        assert_eq!(charts[0]["type"], "pie");
    }

    #[test]
    fn a_mark_without_a_chart_stays_in_the_output() {
        for out in [
            format!("x{MARK}not json\ny\n"),
            format!("x{MARK}[1]\n"),
            format!("x{MARK}{{\"cut"),
        ] {
            let (text, charts) = split_charts(&out, MARK);
            assert_eq!(text, out);
            assert!(charts.is_empty());
        }
        let (text, charts) = split_charts("plain", "");
        assert_eq!((text.as_str(), charts.len()), ("plain", 0));
    }

    #[test]
    fn the_python_starts_with_the_shared_chart_description() {
        for source in [KERNEL_SETUP, SCRIPT_RUNNER] {
            assert!(source.starts_with("# Describes a matplotlib figure"));
            assert!(source.contains("__sandboxd_chart_tools()"));
        }
    }
}
