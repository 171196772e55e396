//! The daemon's log and, optionally, its traces.
//!
//! Contract:
//! - The log goes to stderr as text or as one JSON object a line (`--log-format`), filtered by
//!   `SB_LOG`.
//! - With `--otlp-endpoint URL` (a collector's OTLP/HTTP base, e.g. `http://127.0.0.1:4318`;
//!   `/v1/traces` is added unless the URL already ends with it) the daemon also exports traces
//!   there, protobuf over HTTP, in batches from a thread of their own, as service `sandboxd`:
//!   each API request is a `request` span (its id, method, path and sandbox) and each step of its
//!   flow a child span named for the step — the store's writes (`admit`, `starting`, `running`),
//!   the runtime's work (`runtime-create`, `start`, `adopt`), the agent's calls (`init`, `agent`) —
//!   whatever `SB_LOG` says. The batches follow the `OTEL_BSP_*` variables (every 5 s by default).
//!   An unusable URL stops the daemon before it starts; a collector that is down loses spans,
//!   never a request.
//! - [`Telemetry`] flushes what is left when it is dropped, as `serve` ends.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The log's filter when `SB_LOG` sets none.
const DEFAULT_LOG: &str =
    "info,netlink_packet_route=error,openraft=error,openraft::replication=off";
/// What is exported as traces: requests and the steps of their flows.
const TRACED: &str = "sandboxd_api::request_log=info,sandboxd_service::timing=debug";
/// The path a collector takes traces on.
const TRACES_PATH: &str = "/v1/traces";
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why the traces cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// --otlp-endpoint {0:?} is not an http:// or https:// URL
    #[error("--otlp-endpoint {0:?} is not an http:// or https:// URL")]
    Endpoint(String),
    /// The OTLP exporter could not be built.
    #[error("the OTLP exporter could not be built")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// What keeps the traces going; flushes them when dropped.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(e) = provider.shutdown() {
                eprintln!("sandboxd: the last traces were not exported: {e}");
            }
        }
    }
}

/// `endpoint` with the traces path, when it is an http(s) URL.
fn traces_url(endpoint: &str) -> Result<String, TelemetryError> {
    let bad = || TelemetryError::Endpoint(endpoint.to_string());
    let uri: hyper::Uri = endpoint.parse().map_err(|_| bad())?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(bad());
    }
    let base = endpoint.trim_end_matches('/');
    Ok(if base.ends_with(TRACES_PATH) {
        base.to_string()
    } else {
        format!("{base}{TRACES_PATH}")
    })
}

/// Installs the log (JSON when `json`) and, with `otlp_endpoint`, the trace exporter.
pub fn init(json: bool, otlp_endpoint: Option<&str>) -> Result<Telemetry, TelemetryError> {
    let provider = match otlp_endpoint {
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(traces_url(endpoint)?)
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(TelemetryError::Exporter)?;
            let resource = opentelemetry_sdk::Resource::builder()
                .with_service_name("sandboxd")
                .build();
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(resource)
                    .build(),
            )
        }
        None => None,
    };
    let filter = EnvFilter::try_from_env("SB_LOG").unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG));
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let log = if json {
        // One object a line, with the fields of every span it was logged in (a request's id and
        // sandbox among them) under `spans`.
        log.json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .boxed()
    } else {
        log.boxed()
    };
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("sandboxd"))
            .with_filter(EnvFilter::new(TRACED))
    });
    tracing_subscriber::registry()
        .with(log.with_filter(filter))
        .with(traces)
        .init();
    Ok(Telemetry { provider })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_path_is_added_once_and_only_http_urls_are_taken() {
        assert_eq!(
            traces_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://otel.example/").unwrap(),
            "https://otel.example/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/v1/traces").unwrap(),
            "http://c:4318/v1/traces"
        );
        for bad in ["", "127.0.0.1:4318", "ftp://c/", "http://", "not a url"] {
            assert!(traces_url(bad).is_err(), "{bad:?}");
        }
    }
}
