//! Protocol upgrades (WebSocket and friends) through the proxy.
//!
//! A request asks for an upgrade when its `Connection` header lists the `upgrade` token and it has an
//! `Upgrade` header; only then are those two headers forwarded. If the upstream answers
//! `101 Switching Protocols`, the client gets that 101 (with the upstream's headers, hop-by-hop ones except
//! `Connection: upgrade`/`Upgrade` removed), and a spawned task joins the two upgraded connections with
//! `copy_bidirectional` until either side closes, or until the exchange's [`crate::Closing`] fires
//! (the sandbox was paused): then both connections are dropped, as a frozen upstream could not answer
//! on them. Any other answer is relayed as an ordinary response. The connection that carried an
//! upgrade request never returns to the pool.

use axum::body::Body;
use axum::response::Response;
use http::header::{CONNECTION, UPGRADE};
use http::{HeaderMap, HeaderValue};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::Instrument;

use crate::forward::strip_hop_by_hop;
use crate::route::Target;

/// The `Upgrade` value a request asks for, if it asks for one.
pub(crate) fn requested(headers: &HeaderMap) -> Option<HeaderValue> {
    let asks = headers.get_all(CONNECTION).iter().any(|value| {
        value.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
        })
    });
    if asks {
        headers.get(UPGRADE).cloned()
    } else {
        None
    }
}

/// Puts the upgrade headers back after hop-by-hop stripping.
pub(crate) fn restore_headers(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(UPGRADE, protocol);
}

/// Answers the client with the upstream's 101 and splices both upgraded connections in the background.
pub(crate) fn switch(
    client: OnUpgrade,
    mut upstream_resp: http::Response<Incoming>,
    target: &Target,
    closing: Option<crate::Closing>,
) -> Response {
    let upstream = hyper::upgrade::on(&mut upstream_resp);
    let (mut parts, _empty) = upstream_resp.into_parts();
    let protocol = parts.headers.get(UPGRADE).cloned();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(protocol) = protocol {
        restore_headers(&mut parts.headers, protocol);
    }
    let span =
        tracing::debug_span!("upgraded", sandbox_id = %target.sandbox_id, port = target.port);
    let closing = closing.unwrap_or_else(|| Box::pin(std::future::pending()));
    tokio::spawn(splice(client, upstream, closing).instrument(span));
    Response::from_parts(parts, Body::empty())
}

async fn splice(client: OnUpgrade, upstream: OnUpgrade, closing: crate::Closing) {
    let joined = async {
        let (client, upstream) = match tokio::try_join!(client, upstream) {
            Ok(both) => both,
            Err(err) => {
                tracing::debug!(error = %err, "upgrade did not complete");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut upstream = TokioIo::new(upstream);
        match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            Ok((up, down)) => tracing::debug!(up, down, "upgraded connection closed"),
            Err(err) => tracing::debug!(error = %err, "upgraded connection failed"),
        }
    };
    tokio::select! {
        () = joined => {}
        () = closing => tracing::debug!("upgraded connection closed: the sandbox was paused"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrade_needs_both_the_connection_token_and_the_upgrade_header() {
        let mut headers = HeaderMap::new();
        headers.insert(UPGRADE, HeaderValue::from_static("websocket"));
        assert_eq!(requested(&headers), None);
        headers.insert(CONNECTION, HeaderValue::from_static("keep-alive, Upgrade"));
        assert_eq!(
            requested(&headers),
            Some(HeaderValue::from_static("websocket"))
        );
        headers.remove(UPGRADE);
        assert_eq!(requested(&headers), None);
    }
}
