//! Daytona's sandbox metrics, on the service's one usage sample ([`Service::usage_sample`], the
//! same as E2B's `get_metrics`):
//!
//! - `GET /api/toolbox/{id}/system/metrics` (`get_metrics_latest`) → `{cpuCount, cpuUsedPct,
//!   memUsed, memTotal, memCache, diskUsed, diskTotal, diskFree, timestamp, timestampUnix}`.
//! - `GET /api/sandbox/{key}/telemetry/metrics?from&to&metricNames` (`get_metrics`) → `{series:
//!   [{metricName, dataPoints: [{timestamp, value}]}]}`: the sandbox's usage history within
//!   `from..=to` (RFC 3339, each optional), a point per sample, the last taken now unless `to` is
//!   past ([`Service::usage_history`]). The names are Daytona's
//!   (`daytona.sandbox.cpu.utilization`, …); `metricNames` picks some (comma-separated or
//!   repeated), unknown names are a 400.
//! - `GET /api/config`, which the SDK reads first to learn whether a separate analytics service
//!   holds the metrics: this daemon's configuration, without one.
//!
//! A sandbox that is not running is a 409, as E2B's metrics of one are.

use super::control::{toolbox_url, DEFAULT_SNAPSHOT};
use super::error::DaytonaError;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use sandboxd_service::pause::UsageSample;
use sandboxd_service::timestamps::parse_timestamp;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::Service;
use serde_json::{json, Value};

/// A metric's value in a sample.
type Reading = fn(&UsageSample) -> f64;

/// Daytona's metric names, each with its value in a sample.
const METRICS: [(&str, Reading); 7] = [
    ("daytona.sandbox.cpu.utilization", |s| s.cpu_used_pct),
    ("daytona.sandbox.cpu.limit", |s| f64::from(s.cpu_count)),
    ("daytona.sandbox.memory.usage", |s| s.mem_used as f64),
    ("daytona.sandbox.memory.limit", |s| s.mem_total as f64),
    ("daytona.sandbox.memory.cache", |s| s.mem_cache as f64),
    ("daytona.sandbox.filesystem.usage", |s| s.disk_used as f64),
    ("daytona.sandbox.filesystem.total", |s| s.disk_total as f64),
];

/// `GET /api/toolbox/{id}/system/metrics`.
pub async fn latest(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<Json<Value>, DaytonaError> {
    let s = service.usage_sample(&id).await?;
    let mut latest = serde_json::to_value(s).unwrap_or_default();
    latest["diskFree"] = s.disk_total.saturating_sub(s.disk_used).into();
    latest["timestamp"] = rfc3339(s.at_ms).into();
    latest["timestampUnix"] = (s.at_ms / 1000).into();
    Ok(Json(latest))
}

/// What a series query asks for: its metric names (all when it names none; an unknown one is
/// refused) and its range.
#[derive(Debug)]
struct Asked {
    names: Vec<&'static str>,
    from: Option<i64>,
    to: Option<i64>,
}

/// The query's `from` or `to`, Unix milliseconds.
fn instant(key: &str, value: &str) -> Result<i64, DaytonaError> {
    parse_timestamp(value).ok_or_else(|| {
        DaytonaError::bad_request(format!("{key} must be an RFC 3339 time, not {value:?}"))
    })
}

fn asked(query: Option<&str>) -> Result<Asked, DaytonaError> {
    let (mut names, mut from, mut to) = (Vec::new(), None, None);
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "from" => from = Some(instant(&key, &value)?),
            "to" => to = Some(instant(&key, &value)?),
            _ => {}
        }
        if key != "metricNames" {
            continue;
        }
        for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let known = METRICS.iter().find(|(m, _)| *m == name).ok_or_else(|| {
                DaytonaError::bad_request(format!(
                    "unknown metric {name:?}: sandboxd serves {}",
                    METRICS.map(|(m, _)| m).join(", ")
                ))
            })?;
            if !names.contains(&known.0) {
                names.push(known.0);
            }
        }
    }
    if names.is_empty() {
        names = METRICS.map(|(m, _)| m).to_vec();
    }
    Ok(Asked { names, from, to })
}

/// `GET /api/sandbox/{key}/telemetry/metrics`.
pub async fn series(
    State(service): State<Service>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, DaytonaError> {
    let asked = asked(query.as_deref())?;
    let samples = service.usage_history(&key, asked.from, asked.to).await?;
    // Each sample's time, rendered once for every series.
    let times: Vec<String> = samples.iter().map(|s| rfc3339(s.at_ms)).collect();
    let series: Vec<Value> = METRICS
        .iter()
        .filter(|(name, _)| asked.names.contains(name))
        .map(|(name, value)| {
            let points: Vec<Value> = samples
                .iter()
                .zip(&times)
                .map(|(s, at)| json!({ "timestamp": at, "value": value(s) }))
                .collect();
            json!({ "metricName": name, "dataPoints": points })
        })
        .collect();
    Ok(Json(json!({ "series": series })))
}

/// `GET /api/config`.
pub async fn config(State(service): State<Service>, headers: HeaderMap) -> Json<Value> {
    let toolbox = toolbox_url(&headers);
    let base = toolbox.trim_end_matches("/api/toolbox").to_string();
    let cfg = service.config();
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "oidc": { "issuer": "", "clientId": "", "audience": "", "provider": "none" },
        "linkedAccountsEnabled": false,
        "announcements": {},
        "proxyTemplateUrl": format!(
            "http://{{{{PORT}}}}-{{{{sandboxId}}}}.{}:{}",
            cfg.domain, cfg.public_port
        ),
        "proxyToolboxUrl": toolbox,
        "defaultSnapshot": DEFAULT_SNAPSHOT,
        "dashboardUrl": format!("{base}/console"),
        "maxAutoArchiveInterval": 0,
        "maintananceMode": false,
        "environment": "sandboxd",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_picks_metrics_by_name_and_refuses_unknown_ones() {
        assert_eq!(asked(None).unwrap().names.len(), METRICS.len());
        let picked = asked(Some(
            "metricNames=daytona.sandbox.cpu.limit%2Cdaytona.sandbox.memory.usage\
             &metricNames=daytona.sandbox.cpu.limit",
        ))
        .unwrap();
        assert_eq!(
            picked.names,
            ["daytona.sandbox.cpu.limit", "daytona.sandbox.memory.usage"]
        );
        let refused = asked(Some("metricNames=cpu")).unwrap_err();
        assert_eq!(refused.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(refused.message.contains("\"cpu\""), "{}", refused.message);
    }

    /// A range that starts after it ends is refused too, by the service, for every surface.
    #[test]
    fn a_query_names_its_range_in_rfc3339_and_a_malformed_one_is_refused() {
        let range = asked(Some(
            "from=1970-01-01T00%3A00%3A01%2B00%3A00&to=1970-01-01T00:00:02.500Z",
        ))
        .unwrap();
        assert_eq!((range.from, range.to), (Some(1000), Some(2500)));
        for bad in ["from=x", "to=2026-13-01T00:00:00Z"] {
            let refused = asked(Some(bad)).unwrap_err();
            assert_eq!(refused.status, axum::http::StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn each_metric_reads_its_own_field() {
        let s = UsageSample {
            at_ms: 0,
            cpu_count: 2,
            cpu_used_pct: 12.5,
            mem_used: 3,
            mem_total: 4,
            mem_cache: 5,
            disk_used: 6,
            disk_total: 7,
        };
        let values: Vec<f64> = METRICS.iter().map(|(_, v)| v(&s)).collect();
        assert_eq!(values, [12.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]);
    }
}
