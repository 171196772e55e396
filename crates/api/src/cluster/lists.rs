//! Lists in cluster mode: every member's answer, merged into one.
//!
//! Contract:
//! - The request is sent, as it came, to every member (this node through the router, the others
//!   forwarded); a member that does not answer, or answers an error, is left out and logged. An error
//!   of this node's own is the answer (a bad query is refused the same everywhere).
//! - **Pages.** Every node lists in the order of `(creation time, id)` and its cursor is that pair
//!   (`sandboxd_store`'s keyset cursor), which any node understands. For a keyed list (as its
//!   surface declares it: `/v1/sandboxes`, E2B's `/v2/sandboxes`, Daytona's `/api/sandbox`) the
//!   merged page is cut so that it is exactly the cluster's next page: a node that
//!   has more stops being complete at its own next cursor, so the page keeps only what lies at or
//!   before the smallest such cursor, sorted, at most `limit` of it; the next cursor is the last kept
//!   item's (or that smallest cursor, when `limit` did not cut). No sandbox is skipped or repeated
//!   across pages.
//! - A whole list (E2B's `/sandboxes`; the volume lists of every surface: a volume is in its own
//!   node's store only): its items are concatenated.
//! - A `/v1` list also shows the sandboxes lost with their nodes (state `lost`, from the log), as
//!   the query filters them: a lost node answers no list of its own.

use super::{to_node, Forwarding};
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode};
use sandboxd_api_types as api;
use sandboxd_cluster::NodeId;
use sandboxd_store::{SandboxFilter, SandboxState};
use sandboxd_surface::routes::{ListRoute, ListShape};
use serde_json::Value;
use std::collections::BTreeSet;

/// Largest list answer a member may send for a merge.
const LIST_LIMIT: usize = 64 << 20;
/// The page size when a query names none (the store's default).
const DEFAULT_LIMIT: usize = 100;
/// E2B's header for the next page's token.
const NEXT_TOKEN: &str = "x-next-token";

/// The field of the envelope that holds the items (`None`: the body is the array).
fn envelope(shape: ListShape) -> Option<&'static str> {
    match shape {
        ListShape::Envelope { items, .. } | ListShape::WholeIn { items } => Some(items),
        ListShape::Paged { .. } | ListShape::Whole => None,
    }
}

/// The fields of an item holding its creation time and its id.
fn key_fields(shape: ListShape) -> (&'static str, &'static str) {
    match shape {
        ListShape::Envelope { created, id, .. } | ListShape::Paged { created, id } => (created, id),
        ListShape::Whole | ListShape::WholeIn { .. } => ("", ""),
    }
}

/// One member's page: its items and its next cursor.
struct Page {
    items: Vec<Value>,
    next: Option<String>,
}

/// The middleware's list branch: see the module doc.
pub(super) async fn merge(f: &Forwarding, list: &ListRoute, req: Request, next: Next) -> Response {
    let (parts, _) = req.into_parts();
    let shape = list.shape;
    let me = f.cluster.id();
    let others: Vec<NodeId> = f
        .cluster
        .members()
        .into_keys()
        .filter(|n| *n != me)
        .collect();
    let remote = futures::future::join_all(others.iter().map(|node| {
        let mut copy = Request::builder()
            .method(parts.method.clone())
            .uri(parts.uri.clone())
            .body(Body::empty())
            .expect("a copy of a valid request is valid");
        *copy.headers_mut() = parts.headers.clone();
        to_node(f, *node, copy)
    }));
    let local = next.run(Request::from_parts(parts.clone(), Body::empty()));
    let (local, remote) = futures::join!(local, remote);
    if !local.status().is_success() {
        return local;
    }
    let (mut head, body) = local.into_parts();
    let Some(local_page) = read_page(shape, &head.headers, body).await else {
        return crate::error::Error::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "this node's own list did not read",
        )
        .into_response();
    };
    let mut pages = vec![local_page];
    for (node, resp) in others.iter().zip(remote) {
        if !resp.status().is_success() {
            tracing::warn!(node_id = node, status = %resp.status(), "a member's list is left out");
            continue;
        }
        let (member_head, body) = resp.into_parts();
        match read_page(shape, &member_head.headers, body).await {
            Some(page) => pages.push(page),
            None => tracing::warn!(node_id = node, "a member's list did not parse; left out"),
        }
    }
    if list.path == crate::v1::CLUSTER_ROUTES.lists[0].path {
        // The answer above was this node's own, so the query is a valid one.
        if let Ok(filter) = crate::v1::list_filter(&parts.uri.query().map(str::to_string)) {
            let lost = lost_page(f.service.lost_sandboxes(), &filter, &pages);
            pages.push(lost);
        }
    }
    let limit = query_limit(parts.uri.query()).unwrap_or(DEFAULT_LIMIT);
    let merged = match shape {
        ListShape::Whole | ListShape::WholeIn { .. } => Page {
            items: pages.into_iter().flat_map(|p| p.items).collect(),
            next: None,
        },
        keyed => cut(keyed, pages, limit),
    };
    head.headers.remove(http::header::CONTENT_LENGTH);
    head.headers.remove(NEXT_TOKEN);
    let body = match envelope(shape) {
        Some(field) => {
            let mut body = serde_json::json!({ field: merged.items });
            if let Some(next) = &merged.next {
                body["nextCursor"] = Value::from(next.clone());
            }
            body
        }
        None => {
            if let Some(token) = merged
                .next
                .as_deref()
                .and_then(|t| HeaderValue::from_str(t).ok())
            {
                head.headers.insert(NEXT_TOKEN, token);
            }
            Value::Array(merged.items)
        }
    };
    Response::from_parts(
        head,
        Body::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

/// The sandboxes lost with their nodes that `filter` asks for, after its cursor, as one complete
/// page: a lost node answers no list, so the log speaks for it. One a member lists (its node came
/// back and has not destroyed it yet) is that member's to show.
fn lost_page(lost: Vec<api::Sandbox>, filter: &SandboxFilter, pages: &[Page]) -> Page {
    let listed: BTreeSet<&str> = pages
        .iter()
        .flat_map(|p| &p.items)
        .filter_map(|i| i["id"].as_str())
        .collect();
    let after = filter.cursor.as_deref().and_then(cursor_key);
    let wanted = |s: &api::Sandbox| {
        (filter.states.is_empty() || filter.states.contains(&SandboxState::Lost))
            && filter
                .metadata
                .iter()
                .all(|(k, v)| s.metadata.get(k) == Some(v))
            && !listed.contains(s.id.as_str())
    };
    let items = lost
        .iter()
        .filter(|s| wanted(s))
        .filter_map(|s| serde_json::to_value(s).ok())
        .filter(|item| {
            after
                .as_ref()
                .is_none_or(|a| key_of(crate::v1::LIST_SHAPE, item) > *a)
        })
        .collect();
    Page { items, next: None }
}

/// A member's answer as a page.
async fn read_page(shape: ListShape, headers: &http::HeaderMap, body: Body) -> Option<Page> {
    let bytes = axum::body::to_bytes(body, LIST_LIMIT).await.ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    match (envelope(shape), value) {
        (Some(field), Value::Object(mut body)) => Some(Page {
            items: match body.remove(field) {
                Some(Value::Array(items)) => items,
                _ => return None,
            },
            next: body
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string),
        }),
        (None, Value::Array(items)) => Some(Page {
            items,
            next: headers
                .get(NEXT_TOKEN)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        }),
        _ => None,
    }
}

/// The `limit` of a query, if it names one.
fn query_limit(query: Option<&str>) -> Option<usize> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "limit").then(|| v.parse().ok()).flatten()
    })
}

/// The keyset position `(creation ms, id)` of an item, or of a cursor.
type Key = (i64, String);

fn key_of(shape: ListShape, item: &Value) -> Key {
    let (at, id) = key_fields(shape);
    let ms = item[at]
        .as_str()
        .and_then(sandboxd_service::timestamps::parse_timestamp)
        .unwrap_or(i64::MAX);
    (ms, item[id].as_str().unwrap_or_default().to_string())
}

fn cursor_key(cursor: &str) -> Option<Key> {
    let (at, id) = cursor.split_once(':')?;
    Some((at.parse().ok()?, id.to_string()))
}

/// The cluster's page out of every member's: see the module doc.
fn cut(shape: ListShape, pages: Vec<Page>, limit: usize) -> Page {
    let bound = pages
        .iter()
        .filter_map(|p| p.next.as_deref().and_then(cursor_key))
        .min();
    let mut items: Vec<(Key, Value)> = pages
        .into_iter()
        .flat_map(|p| p.items)
        .map(|item| (key_of(shape, &item), item))
        .filter(|(key, _)| bound.as_ref().is_none_or(|b| key <= b))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let next = if items.len() > limit {
        items.truncate(limit);
        items.last().map(|((at, id), _)| format!("{at}:{id}"))
    } else {
        bound.map(|(at, id)| format!("{at}:{id}"))
    };
    Page {
        items: items.into_iter().map(|(_, item)| item).collect(),
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const V1: ListShape = crate::v1::LIST_SHAPE;

    fn shape_of(path: &str) -> Option<ListShape> {
        crate::SURFACES
            .iter()
            .find_map(|s| s.list(path))
            .map(|l| l.shape)
    }

    fn item(at_ms: i64, id: &str) -> Value {
        json!({"createdAt": sandboxd_service::timestamps::rfc3339(at_ms), "id": id})
    }

    fn ids(page: &Page) -> Vec<&str> {
        page.items
            .iter()
            .map(|i| i["id"].as_str().unwrap())
            .collect()
    }

    /// Paging through every member's pages with the merged cursor visits each sandbox once, in order.
    #[test]
    fn merged_pages_skip_and_repeat_nothing() {
        // Node A holds 1, 4, 5, 6; node B holds 2, 3, 7 (creation ms = the number).
        let a: Vec<Value> = [1, 4, 5, 6]
            .iter()
            .map(|n| item(*n, &format!("a{n}")))
            .collect();
        let b: Vec<Value> = [2, 3, 7]
            .iter()
            .map(|n| item(*n, &format!("b{n}")))
            .collect();
        let page_of = |all: &[Value], after: Option<&Key>, limit: usize| {
            let rest: Vec<Value> = all
                .iter()
                .filter(|i| after.is_none_or(|k| key_of(V1, i) > *k))
                .cloned()
                .collect();
            let next = (rest.len() > limit).then(|| {
                let (at, id) = key_of(V1, &rest[limit - 1]);
                format!("{at}:{id}")
            });
            Page {
                items: rest.into_iter().take(limit).collect(),
                next,
            }
        };
        let mut seen = Vec::new();
        let mut cursor: Option<Key> = None;
        for _ in 0..10 {
            let pages = vec![
                page_of(&a, cursor.as_ref(), 2),
                page_of(&b, cursor.as_ref(), 2),
            ];
            let page = cut(V1, pages, 2);
            assert!(page.items.len() <= 2);
            seen.extend(ids(&page).into_iter().map(str::to_string));
            match page.next.as_deref().and_then(cursor_key) {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(seen, ["a1", "b2", "b3", "a4", "a5", "a6", "b7"]);
    }

    fn lost(at_ms: i64, id: &str, team: &str) -> api::Sandbox {
        serde_json::from_value(json!({
            "id": id, "name": "", "state": "lost", "template": "base", "cpu": 1.0,
            "memoryMB": 512, "createdAt": sandboxd_service::timestamps::rfc3339(at_ms),
            "metadata": {"team": team},
        }))
        .unwrap()
    }

    #[test]
    fn the_lost_page_holds_what_the_query_asks_for_after_its_cursor() {
        let all = || vec![lost(1, "l1", "a"), lost(5, "l5", "b"), lost(9, "l9", "a")];
        let listed = [Page {
            items: vec![item(9, "l9")],
            next: None,
        }];
        let page = lost_page(all(), &SandboxFilter::default(), &listed);
        assert_eq!(ids(&page), ["l1", "l5"], "a listed one is its member's");
        assert_eq!(page.next, None);
        let filter = SandboxFilter {
            metadata: vec![("team".into(), "a".into())],
            ..SandboxFilter::default()
        };
        assert_eq!(ids(&lost_page(all(), &filter, &[])), ["l1", "l9"]);
        let filter = SandboxFilter {
            cursor: Some("1:l1".into()),
            ..SandboxFilter::default()
        };
        assert_eq!(ids(&lost_page(all(), &filter, &[])), ["l5", "l9"]);
        let filter = SandboxFilter {
            states: vec![SandboxState::Running],
            ..SandboxFilter::default()
        };
        assert!(lost_page(all(), &filter, &[]).items.is_empty());
    }

    #[test]
    fn a_list_without_more_pages_answers_no_cursor() {
        let pages = vec![
            Page {
                items: vec![item(2, "b")],
                next: None,
            },
            Page {
                items: vec![item(1, "a")],
                next: None,
            },
        ];
        let page = cut(V1, pages, 100);
        assert_eq!(ids(&page), ["a", "b"]);
        assert_eq!(page.next, None);
        assert_eq!(query_limit(Some("state=running&limit=7")), Some(7));
        assert_eq!(
            shape_of("/v2/sandboxes"),
            Some(ListShape::Paged {
                created: "startedAt",
                id: "sandboxID"
            })
        );
        assert_eq!(
            shape_of("/api/sandbox"),
            Some(ListShape::Envelope {
                items: "items",
                created: "createdAt",
                id: "id"
            })
        );
        assert_eq!(shape_of("/sandboxes"), Some(ListShape::Whole));
    }
}
