//! Daytona's sandbox metrics, on the service's one usage sample ([`Service::usage_sample`], the
//! same as E2B's `get_metrics`):
//!
//! - `GET /api/toolbox/{id}/system/metrics` (`get_metrics_latest`) → `{cpuCount, cpuUsedPct,
//!   memUsed, memTotal, memCache, diskUsed, diskTotal, diskFree, timestamp, timestampUnix}`.
//! - `GET /api/sandbox/{key}/telemetry/metrics?from&to&metricNames` (`get_metrics`) → `{series:
//!   [{metricName, dataPoints: [{timestamp, value}]}]}`. sandboxd keeps no history: each series
//!   holds the sample taken now, whatever the range asked. The names are Daytona's
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
use sandboxd_service::sandboxes::rfc3339;
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

/// The metric names a query asks for (all when it names none); an unknown one is refused.
fn asked(query: Option<&str>) -> Result<Vec<&'static str>, DaytonaError> {
    let mut names = Vec::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
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
    Ok(names)
}

/// `GET /api/sandbox/{key}/telemetry/metrics`.
pub async fn series(
    State(service): State<Service>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Value>, DaytonaError> {
    let names = asked(query.as_deref())?;
    let sample = service.usage_sample(&key).await?;
    let at = rfc3339(sample.at_ms);
    let series: Vec<Value> = METRICS
        .iter()
        .filter(|(name, _)| names.contains(name))
        .map(|(name, value)| {
            json!({
                "metricName": name,
                "dataPoints": [{ "timestamp": at, "value": value(&sample) }],
            })
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
        assert_eq!(asked(None).unwrap().len(), METRICS.len());
        let picked = asked(Some(
            "from=x&metricNames=daytona.sandbox.cpu.limit%2Cdaytona.sandbox.memory.usage\
             &metricNames=daytona.sandbox.cpu.limit",
        ))
        .unwrap();
        assert_eq!(
            picked,
            ["daytona.sandbox.cpu.limit", "daytona.sandbox.memory.usage"]
        );
        let refused = asked(Some("metricNames=cpu")).unwrap_err();
        assert_eq!(refused.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(refused.message.contains("\"cpu\""), "{}", refused.message);
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
