//! The web console at `/console`: a single page, its scripts and styles built into the binary (no
//! CDN, nothing fetched at run time).
//!
//! Contract: the assets are public (they hold no data); everything the page shows comes from the
//! API it calls with the key the user signs in with, which the page keeps in the browser session's
//! storage only. Without a key the page shows the sign-in and nothing else. Its terminal is the
//! `/v1` terminal WebSocket, the key offered as a subprotocol (`sandboxd_surface::auth::WEBSOCKET_BEARER`).
//! The page may load nothing but its own assets (`Content-Security-Policy`).

use axum::extract::Path;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// `(name, content type, bytes)` of every asset under `/console/assets/`.
const ASSETS: &[(&str, &str, &[u8])] = &[
    ("app.js", JS, include_bytes!("../assets/app.js")),
    ("api.js", JS, include_bytes!("../assets/api.js")),
    ("ui.js", JS, include_bytes!("../assets/ui.js")),
    ("sandboxes.js", JS, include_bytes!("../assets/sandboxes.js")),
    ("sandbox.js", JS, include_bytes!("../assets/sandbox.js")),
    ("admin.js", JS, include_bytes!("../assets/admin.js")),
    ("volumes.js", JS, include_bytes!("../assets/volumes.js")),
    ("secrets.js", JS, include_bytes!("../assets/secrets.js")),
    ("app.css", CSS, include_bytes!("../assets/app.css")),
    (
        "vendor/xterm.js",
        JS,
        include_bytes!("../assets/vendor/xterm.js"),
    ),
    (
        "vendor/addon-fit.js",
        JS,
        include_bytes!("../assets/vendor/addon-fit.js"),
    ),
    (
        "vendor/xterm.css",
        CSS,
        include_bytes!("../assets/vendor/xterm.css"),
    ),
];

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const INDEX: &[u8] = include_bytes!("../assets/index.html");

/// Only the console's own assets; xterm.js sets styles inline; the API and its WebSockets are
/// same-origin.
const CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                   connect-src 'self' ws: wss:; frame-ancestors 'none'";

/// The console's routes (public: see the module contract).
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route("/console/assets/{*name}", get(asset))
}

async fn index() -> Response {
    page("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, ..)| *n == name) {
        Some((_, kind, bytes)) => page(kind, bytes),
        None => (StatusCode::NOT_FOUND, "no such console asset").into_response(),
    }
}

fn page(kind: &'static str, bytes: &'static [u8]) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        bytes,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_the_page_imports_is_served() {
        let index = std::str::from_utf8(INDEX).unwrap();
        for (name, ..) in ASSETS {
            if name.ends_with(".js") && !name.starts_with("vendor/") && *name != "app.js" {
                let importer =
                    ASSETS
                        .iter()
                        .filter(|(n, ..)| n.ends_with(".js"))
                        .any(|(_, _, b)| {
                            std::str::from_utf8(b)
                                .unwrap()
                                .contains(&format!("./{name}"))
                        });
                assert!(importer, "{name} is served but nothing imports it");
            }
        }
        for needed in ["assets/app.js", "assets/vendor/xterm.js", "assets/app.css"] {
            assert!(index.contains(needed), "index.html does not load {needed}");
        }
    }
}
