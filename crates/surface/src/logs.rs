//! A template's build log as a response body, for every surface that shows one (`/v1`'s NDJSON,
//! Daytona's plain text): one reader of the store's log lines, each surface its own renderer.
//!
//! Contract: lines come in the order they were written, each once; with `follow` the body stays open
//! until the build has ended and every line written before its end was sent, then it ends.

use axum::body::{Body, Bytes};
use sandboxd_service::Service;
use sandboxd_store::{LogLine, TemplateState};
use std::time::Duration;

/// How often a followed log looks for new lines.
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Template `name`'s build log from line `offset` on, each line as `render` writes it; with
/// `follow` the stream stays open until the build has ended and every line was sent.
pub fn log_stream(
    service: Service,
    name: String,
    offset: u64,
    follow: bool,
    render: fn(&LogLine) -> Vec<u8>,
) -> Body {
    let stream = futures::stream::unfold(
        (service, name, offset, false),
        move |(service, name, offset, done)| async move {
            if done {
                return None;
            }
            loop {
                // Read the state first: lines written before a build ended are all there then.
                let ended = match service.get_template(&name).await {
                    Ok(t) => t.state != TemplateState::Building,
                    Err(_) => true,
                };
                let lines = service
                    .template_log(&name, offset, 500)
                    .await
                    .unwrap_or_default();
                if !lines.is_empty() {
                    let next = lines.last().map_or(offset, |l| l.seq + 1);
                    let chunk: Vec<u8> = lines.iter().flat_map(render).collect();
                    return Some((
                        Ok::<_, std::convert::Infallible>(Bytes::from(chunk)),
                        (service, name, next, false),
                    ));
                }
                if !follow || ended {
                    return None;
                }
                tokio::time::sleep(FOLLOW_POLL).await;
            }
        },
    );
    Body::from_stream(stream)
}
