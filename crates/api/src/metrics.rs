//! `/metrics` in the Prometheus text format: sandboxes by state, request latencies by route, the store
//! writer's queue depth and batching, and what sandboxes' agents' call-home events came to
//! (`sandboxd_agent_events_total{outcome}`: applied, duplicate, unchanged, refused, rejected), and
//! each volume's usage and limit (`sandboxd_volume_used_bytes{volume}`,
//! `sandboxd_volume_limit_bytes{volume}`, where the host's disk quota measures them).

use axum::extract::{MatchedPath, Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sandboxd_service::Service;
use sandboxd_store::SandboxState;
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VolumeLabels {
    volume: String,
}

/// The daemon's metrics.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    latency: Family<RouteLabels, Histogram>,
    sandboxes: Family<StateLabels, Gauge>,
    queue_depth: Gauge,
    batches: Counter,
    writes: Counter,
    agent_events: Family<OutcomeLabels, Counter>,
    volume_used: Family<VolumeLabels, Gauge>,
    volume_limit: Family<VolumeLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("sandboxd");
        let latency = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        registry.register(
            "http_request_duration_seconds",
            "Latency of HTTP requests by route",
            latency.clone(),
        );
        let sandboxes = Family::<StateLabels, Gauge>::default();
        registry.register("sandboxes", "Sandboxes by state", sandboxes.clone());
        let queue_depth = Gauge::default();
        registry.register(
            "store_queue_depth",
            "Writes waiting for the store writer",
            queue_depth.clone(),
        );
        let batches = Counter::default();
        registry.register(
            "store_batches",
            "Group-commit batches the store writer committed",
            batches.clone(),
        );
        let writes = Counter::default();
        registry.register(
            "store_writes",
            "Writes the store writer executed",
            writes.clone(),
        );
        let agent_events = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "agent_events",
            "Events sandboxes' agents reported, by what they came to",
            agent_events.clone(),
        );
        let volume_used = Family::<VolumeLabels, Gauge>::default();
        registry.register(
            "volume_used_bytes",
            "Bytes each volume holds",
            volume_used.clone(),
        );
        let volume_limit = Family::<VolumeLabels, Gauge>::default();
        registry.register(
            "volume_limit_bytes",
            "Each volume's size limit in bytes (volumes with one)",
            volume_limit.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                latency,
                sandboxes,
                queue_depth,
                batches,
                writes,
                agent_events,
                volume_used,
                volume_limit,
            }),
        }
    }
}

/// Middleware recording each request's latency under its route template.
pub async fn track(State(metrics): State<Metrics>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(req).await;
    let labels = RouteLabels {
        method,
        route,
        status: response.status().as_u16(),
    };
    metrics
        .inner
        .latency
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    response
}

/// `GET /metrics`.
pub async fn render(State((metrics, service)): State<(Metrics, Service)>) -> Response {
    let inner = &metrics.inner;
    if let Ok(rows) = service
        .reader()
        .read(|tx| tx.sandboxes_in_states(&SandboxState::ALL))
        .await
    {
        for state in SandboxState::ALL {
            let n = rows.iter().filter(|r| r.state == state).count();
            inner
                .sandboxes
                .get_or_create(&StateLabels {
                    state: state.as_str().to_string(),
                })
                .set(n as i64);
        }
    }
    let stats = service.writer().stats();
    inner.queue_depth.set(stats.queue_depth as i64);
    bump_to(&inner.batches, stats.batches_total);
    bump_to(&inner.writes, stats.requests_total);
    for (outcome, total) in service.agent_event_counts() {
        let labels = OutcomeLabels {
            outcome: outcome.to_string(),
        };
        bump_to(&inner.agent_events.get_or_create(&labels), total);
    }
    // Only the volumes there are now: a deleted one's series goes with it.
    inner.volume_used.clear();
    inner.volume_limit.clear();
    for volume in service.list_volumes().await.unwrap_or_default() {
        let Some(usage) = service.volume_usage(&volume.id).await else {
            continue;
        };
        let labels = VolumeLabels {
            volume: volume.name,
        };
        let used = i64::try_from(usage.used_bytes).unwrap_or(i64::MAX);
        inner.volume_used.get_or_create(&labels).set(used);
        if let Some(limit) = usage.limit_bytes {
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            inner.volume_limit.get_or_create(&labels).set(limit);
        }
    }
    let mut body = String::new();
    if prometheus_client::encoding::text::encode(&mut body, &inner.registry).is_err() {
        return axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        body,
    )
        .into_response()
}

/// Advances a counter to an absolute value read from elsewhere.
fn bump_to(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}
