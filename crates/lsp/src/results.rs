//! Servers' results in the shapes the surfaces serve (Daytona's `CompletionList` and `LspSymbol`).
//!
//! - A completion result may be a `CompletionList` or a bare array of items (or `null`); either
//!   becomes `{isIncomplete, items}`, each item keeping `label`, `kind`, `detail`,
//!   `documentation`, `sortText`, `filterText` and `insertText` where the server gave them;
//!   documentation given as a bare string becomes `{kind: "plaintext", value}` (LSP's
//!   `MarkupContent`), so it always has one shape.
//! - Symbols may come flat (`SymbolInformation`, with a location), nested (`DocumentSymbol`, with
//!   a range and children) or as `WorkspaceSymbol` (a location that may lack its range); each
//!   becomes `{name, kind, location: {uri, range}}`, children after their parent.

use serde_json::{json, Map, Value};

const ITEM_FIELDS: [&str; 7] = [
    "label",
    "kind",
    "detail",
    "documentation",
    "sortText",
    "filterText",
    "insertText",
];

/// `{isIncomplete, items}` from a `textDocument/completion` result.
pub fn completion_list(result: &Value) -> Value {
    let (incomplete, items) = match result {
        Value::Array(items) => (false, items.as_slice()),
        Value::Object(list) => (
            list.get("isIncomplete")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            list.get("items")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default(),
        ),
        _ => (false, &[][..]),
    };
    let items: Vec<Value> = items
        .iter()
        .filter(|item| item.get("label").is_some_and(Value::is_string))
        .map(|item| {
            let kept: Map<String, Value> = ITEM_FIELDS
                .iter()
                .filter_map(|f| {
                    item.get(*f).filter(|v| !v.is_null()).map(|v| {
                        let v = match v {
                            Value::String(text) if *f == "documentation" => {
                                json!({"kind": "plaintext", "value": text})
                            }
                            other => other.clone(),
                        };
                        (f.to_string(), v)
                    })
                })
                .collect();
            Value::Object(kept)
        })
        .collect();
    json!({"isIncomplete": incomplete, "items": items})
}

/// Flat `{name, kind, location}` symbols from a `textDocument/documentSymbol` or
/// `workspace/symbol` result; `uri` is the document's, for nested symbols that name none.
pub fn flat_symbols(result: &Value, uri: Option<&str>) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(symbols) = result.as_array() {
        for s in symbols {
            flatten(s, uri, &mut out);
        }
    }
    out
}

fn flatten(symbol: &Value, uri: Option<&str>, out: &mut Vec<Value>) {
    let (Some(name), Some(kind)) = (
        symbol.get("name").and_then(Value::as_str),
        symbol.get("kind").and_then(Value::as_i64),
    ) else {
        return;
    };
    let zero = json!({"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}});
    let location = match symbol.get("location") {
        Some(loc) => json!({
            "uri": loc.get("uri").cloned().unwrap_or(Value::Null),
            "range": loc.get("range").cloned().unwrap_or(zero),
        }),
        None => json!({
            "uri": uri,
            "range": symbol.get("range").cloned().unwrap_or(zero),
        }),
    };
    if location["uri"].is_string() {
        out.push(json!({"name": name, "kind": kind, "location": location}));
    }
    for child in symbol
        .get("children")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        flatten(child, uri, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_and_a_bare_array_of_completions_give_the_same_shape() {
        let item = json!({"label": "append", "kind": 2, "detail": "append(x)", "data": {"big": 1},
                          "documentation": {"kind": "markdown", "value": "Adds"}});
        let from_list = completion_list(&json!({"isIncomplete": true, "items": [item.clone()]}));
        assert_eq!(from_list["isIncomplete"], true);
        let from_array = completion_list(&json!([item]));
        assert_eq!(from_array["isIncomplete"], false);
        assert_eq!(from_list["items"], from_array["items"]);
        let kept = &from_list["items"][0];
        assert_eq!(kept["label"], "append");
        assert_eq!(kept["documentation"]["value"], "Adds");
        assert!(
            kept.get("data").is_none(),
            "server-private fields are dropped"
        );
        assert_eq!(completion_list(&Value::Null)["items"], json!([]));
        let plain = completion_list(&json!([{"label": "x", "documentation": "Docs"}]));
        assert_eq!(
            plain["items"][0]["documentation"],
            json!({"kind": "plaintext", "value": "Docs"})
        );
        assert_eq!(completion_list(&json!([{"kind": 1}]))["items"], json!([]));
    }

    #[test]
    fn nested_symbols_are_flattened_with_the_documents_uri() {
        let range =
            json!({"start": {"line": 1, "character": 0}, "end": {"line": 3, "character": 1}});
        let nested = json!([{"name": "Greeter", "kind": 5, "range": range, "selectionRange": range,
            "children": [{"name": "hello", "kind": 6, "range": range, "selectionRange": range}]}]);
        let flat = flat_symbols(&nested, Some("file:///p/a.py"));
        let names: Vec<_> = flat.iter().map(|s| s["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["Greeter", "hello"]);
        assert_eq!(flat[1]["location"]["uri"], "file:///p/a.py");
        assert_eq!(flat[1]["location"]["range"], range);
    }

    #[test]
    fn flat_and_workspace_symbols_keep_their_own_location() {
        let info = json!([{"name": "f", "kind": 12, "containerName": "m",
            "location": {"uri": "file:///p/b.py", "range": {"start": {"line": 4, "character": 0},
                                                              "end": {"line": 5, "character": 0}}}},
            {"name": "g", "kind": 12, "location": {"uri": "file:///p/c.py"}},
            {"name": "nameless kind"}]);
        let flat = flat_symbols(&info, None);
        assert_eq!(flat.len(), 2);
        assert_eq!(flat[0]["location"]["uri"], "file:///p/b.py");
        assert_eq!(flat[1]["location"]["range"]["start"]["line"], 0);
        assert!(flat_symbols(&Value::Null, None).is_empty());
    }
}
