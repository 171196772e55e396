//! `/metrics` in the Prometheus text format: sandboxes by state, request latencies by route, the store
//! writer's queue depth and batching, and what sandboxes' agents' call-home events came to
//! (`sandboxd_agent_events_total{outcome}`: applied, duplicate, unchanged, refused, rejected), and
//! each volume's usage and limit (`sandboxd_volume_used_bytes{volume}`,
//! `sandboxd_volume_limit_bytes{volume}`, where the host's disk quota measures them), and each
//! template's warm pool (`sandboxd_warm_pool_{size,ready,warming}{template}`,
//! `sandboxd_warm_pool_{hits,misses}_total{template}`, `sandboxd_warm_pool_refill_ms{template}`: how
//! long its last sandbox took to boot).

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
struct TemplateLabels {
    template: String,
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
    pools: PoolMetrics,
}

/// The warm pools' series, by template.
#[derive(Default)]
struct PoolMetrics {
    size: Family<TemplateLabels, Gauge>,
    ready: Family<TemplateLabels, Gauge>,
    warming: Family<TemplateLabels, Gauge>,
    refill_ms: Family<TemplateLabels, Gauge>,
    hits: Family<TemplateLabels, Counter>,
    misses: Family<TemplateLabels, Counter>,
}

impl PoolMetrics {
    fn register(&self, registry: &mut Registry) {
        for (name, help, gauge) in [
            (
                "warm_pool_size",
                "Sandboxes each warm pool keeps",
                &self.size,
            ),
            (
                "warm_pool_ready",
                "Booted sandboxes each warm pool holds",
                &self.ready,
            ),
            (
                "warm_pool_warming",
                "Sandboxes each warm pool is booting",
                &self.warming,
            ),
            (
                "warm_pool_refill_ms",
                "How long the last sandbox each warm pool made took to boot, ms",
                &self.refill_ms,
            ),
        ] {
            registry.register(name, help, gauge.clone());
        }
        registry.register(
            "warm_pool_hits",
            "Creates that took a sandbox from a warm pool",
            self.hits.clone(),
        );
        registry.register(
            "warm_pool_misses",
            "Creates a warm pool had no sandbox ready for",
            self.misses.clone(),
        );
    }

    fn set(&self, pools: Vec<sandboxd_api_types::WarmPool>) {
        for gauge in [&self.size, &self.ready, &self.warming, &self.refill_ms] {
            gauge.clear();
        }
        for pool in pools {
            let labels = TemplateLabels {
                template: pool.template,
            };
            self.size.get_or_create(&labels).set(pool.size.into());
            self.ready.get_or_create(&labels).set(pool.ready.into());
            self.warming.get_or_create(&labels).set(pool.warming.into());
            if let Some(ms) = pool.last_refill_ms {
                let ms = i64::try_from(ms).unwrap_or(i64::MAX);
                self.refill_ms.get_or_create(&labels).set(ms);
            }
            bump_to(&self.hits.get_or_create(&labels), pool.hits);
            bump_to(&self.misses.get_or_create(&labels), pool.misses);
        }
    }
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
        let pools = PoolMetrics::default();
        pools.register(&mut registry);
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
                pools,
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
    if let Ok(pools) = service.warm_pools().await {
        inner.pools.set(pools);
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
