//! A chart as Daytona's SDKs read one: the description sandboxd makes of a figure
//! ([`sandboxd_charts`], E2B's shape) with Daytona's differences applied:
//! - a figure of several axes is a `composite_chart` (E2B's `superchart`), its elements charts
//!   themselves;
//! - a bar's `value` is a string;
//! - a point's coordinates are numbers: a point with any other (a date, a category, a NaN) is
//!   left out, where E2B's shape would carry it as text or null.

use serde_json::Value;

/// `chart` in Daytona's shape.
pub fn daytona_chart(mut chart: Value) -> Value {
    let composite = chart["type"] == "superchart";
    if composite {
        chart["type"] = "composite_chart".into();
    }
    let bar = chart["type"] == "bar";
    if let Some(elements) = chart.get_mut("elements").and_then(Value::as_array_mut) {
        for element in elements.iter_mut() {
            if composite {
                *element = daytona_chart(element.take());
                continue;
            }
            if bar {
                if let Some(value) = element.get("value").filter(|v| !v.is_string()) {
                    element["value"] = match value {
                        Value::Null => Value::Null,
                        other => other.to_string().into(),
                    };
                }
            }
            if let Some(points) = element.get_mut("points").and_then(Value::as_array_mut) {
                points.retain(|p| {
                    p.as_array()
                        .is_some_and(|xy| xy.iter().all(Value::is_number))
                });
            }
        }
    }
    chart
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bars_values_become_strings_and_superchart_a_composite_of_charts() {
        let chart = json!({
            "type": "superchart",
            "elements": [
                {"type": "bar", "elements": [{"label": "a", "value": 1.5, "group": ""}]},
                {"type": "line", "elements": [{"label": "l", "points": [[1.0, 2.0], ["2024-01-01", 3.0], [4.0, null]]}]}
            ]
        });
        let out = daytona_chart(chart);
        assert_eq!(out["type"], "composite_chart");
        assert_eq!(out["elements"][0]["elements"][0]["value"], "1.5");
        assert_eq!(
            out["elements"][1]["elements"][0]["points"],
            json!([[1.0, 2.0]])
        );
    }

    #[test]
    fn a_chart_already_in_daytonas_shape_is_unchanged() {
        let chart = json!({"type": "pie", "title": "t", "png": "AAAA",
            "elements": [{"label": "x", "angle": 90.0, "radius": 1.0}]});
        assert_eq!(daytona_chart(chart.clone()), chart);
    }
}
