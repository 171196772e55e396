//! The `/execute` stream's lines: Jupyter iopub messages mapped onto E2B's output objects.
//!
//! Contract (what the E2B Code Interpreter SDKs parse, one JSON object per line):
//! - `stream` → `{"type":"stdout"|"stderr","text","timestamp"}` (RFC 3339, UTC);
//! - `execute_input` → `{"type":"number_of_executions","execution_count"}`;
//! - `execute_result` → a `result` with `is_main_result: true`, `display_data` → one with `false`;
//!   its MIME bundle keyed as E2B keys it ([`FORMATS`]), the chart the kernel-side formatter made
//!   ([`CHART_MIME`]) as `chart`, any other MIME type under `extra`; absent formats are omitted;
//! - `error` → `{"type":"error","name","value","traceback"}` with the traceback's lines joined;
//! - every other message maps to nothing.

use jupyter_protocol::{JupyterMessageContent, Stdio};
use serde_json::{json, Map, Value};

/// The MIME type of the chart description our kernel-side formatter adds to a matplotlib figure's
/// bundle (see `sandboxd_charts::KERNEL_SETUP`).
pub const CHART_MIME: &str = "application/vnd.sandboxd.chart+json";

/// MIME types and the result fields E2B gives them.
pub const FORMATS: [(&str, &str); 10] = [
    ("text/plain", "text"),
    ("text/html", "html"),
    ("text/markdown", "markdown"),
    ("image/svg+xml", "svg"),
    ("image/png", "png"),
    ("image/jpeg", "jpeg"),
    ("application/pdf", "pdf"),
    ("text/latex", "latex"),
    ("application/json", "json"),
    ("application/javascript", "javascript"),
];

/// The stream line of `content`, if it has one; `now` stamps output.
pub fn line(content: &JupyterMessageContent, now: &str) -> Option<Value> {
    match content {
        JupyterMessageContent::StreamContent(s) => Some(json!({
            "type": match s.name { Stdio::Stdout => "stdout", Stdio::Stderr => "stderr" },
            "text": s.text,
            "timestamp": now,
        })),
        JupyterMessageContent::ExecuteInput(input) => Some(json!({
            "type": "number_of_executions",
            "execution_count": input.execution_count.value(),
        })),
        JupyterMessageContent::ExecuteResult(r) => Some(result(bundle(&r.data), true)),
        JupyterMessageContent::DisplayData(d) => Some(result(bundle(&d.data), false)),
        JupyterMessageContent::ErrorOutput(e) => {
            Some(error(&e.ename, &e.evalue, &e.traceback.join("\n")))
        }
        _ => None,
    }
}

/// An `error` line.
pub fn error(name: &str, value: &str, traceback: &str) -> Value {
    json!({ "type": "error", "name": name, "value": value, "traceback": traceback })
}

/// A MIME bundle as the kernel sent it: MIME type → value.
fn bundle(media: &jupyter_protocol::Media) -> Map<String, Value> {
    match serde_json::to_value(media) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// A `result` line from a MIME bundle.
pub fn result(bundle: Map<String, Value>, is_main_result: bool) -> Value {
    let mut out = Map::new();
    out.insert("type".into(), json!("result"));
    out.insert("is_main_result".into(), json!(is_main_result));
    let mut extra = Map::new();
    for (mime, value) in bundle {
        if let Some((_, field)) = FORMATS.iter().find(|(m, _)| *m == mime) {
            out.insert((*field).to_string(), text_or_value(value, field));
        } else if mime == CHART_MIME {
            out.insert("chart".into(), value);
        } else {
            extra.insert(mime, value);
        }
    }
    if !extra.is_empty() {
        out.insert("extra".into(), Value::Object(extra));
    }
    Value::Object(out)
}

/// Text formats may arrive as a list of lines (the notebook form); E2B sends one string. JSON stays
/// JSON.
fn text_or_value(value: Value, field: &str) -> Value {
    match value {
        Value::Array(lines) if field != "json" && lines.iter().all(Value::is_string) => {
            Value::String(lines.iter().filter_map(Value::as_str).collect::<String>())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jupyter_protocol::{
        DisplayData, ErrorOutput, ExecuteResult, Media, MediaType, StreamContent,
    };

    fn media(items: Vec<MediaType>) -> Media {
        Media { content: items }
    }

    #[test]
    fn streams_become_stdout_and_stderr_lines() {
        let out = line(&StreamContent::stdout("hi\n").into(), "T").unwrap();
        assert_eq!(
            out,
            json!({"type": "stdout", "text": "hi\n", "timestamp": "T"})
        );
        let err = line(&StreamContent::stderr("oops").into(), "T").unwrap();
        assert_eq!(err["type"], "stderr");
    }

    #[test]
    fn an_execute_result_is_the_main_result_with_e2b_field_names() {
        let r = ExecuteResult {
            data: media(vec![
                MediaType::Plain("2".into()),
                MediaType::Html("<b>2</b>".into()),
                MediaType::Png("iVBOR".into()),
            ]),
            ..Default::default()
        };
        let out = line(&r.into(), "T").unwrap();
        assert_eq!(out["type"], "result");
        assert_eq!(out["is_main_result"], true);
        assert_eq!(out["text"], "2");
        assert_eq!(out["html"], "<b>2</b>");
        assert_eq!(out["png"], "iVBOR");
        assert!(
            out.get("svg").is_none(),
            "absent formats are omitted: {out}"
        );
        assert!(out.get("extra").is_none());
    }

    #[test]
    fn display_data_is_not_main_and_unknown_types_go_to_extra_and_charts_to_chart() {
        let d = DisplayData::new(media(vec![
            MediaType::Plain("<Figure>".into()),
            MediaType::Other((CHART_MIME.into(), json!({"type": "line", "elements": []}))),
            MediaType::Other(("application/x-thing".into(), json!("v"))),
            MediaType::Json(json!({"a": [1, 2]})),
        ]));
        let out = line(&d.into(), "T").unwrap();
        assert_eq!(out["is_main_result"], false);
        assert_eq!(out["chart"]["type"], "line");
        assert_eq!(out["extra"], json!({"application/x-thing": "v"}));
        assert_eq!(out["json"], json!({"a": [1, 2]}));
    }

    #[test]
    fn errors_carry_name_value_and_one_traceback_string() {
        let e = ErrorOutput {
            ename: "ZeroDivisionError".into(),
            evalue: "division by zero".into(),
            traceback: vec!["line 1".into(), "line 2".into()],
        };
        let out = line(&e.into(), "T").unwrap();
        assert_eq!(
            out,
            json!({"type": "error", "name": "ZeroDivisionError", "value": "division by zero", "traceback": "line 1\nline 2"})
        );
    }

    #[test]
    fn notebook_style_line_lists_are_joined() {
        let mut bundle = Map::new();
        bundle.insert("text/html".into(), json!(["<p>", "x</p>"]));
        assert_eq!(result(bundle, true)["html"], "<p>x</p>");
    }
}
