//! The volume API as tests drive it: make a volume, read and write its files.

use super::Daemon;
use serde_json::Value;

/// Makes a volume (201 expected) and returns it.
pub async fn create_volume(d: &Daemon, body: Value) -> Value {
    let resp = d.post_json("/v1/volumes", &body).await;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert_eq!(status, 201, "create volume {body}: {text}");
    serde_json::from_str(&text).expect("a Volume")
}

/// `GET` a volume file's content.
pub async fn volume_file(d: &Daemon, volume: &str, path: &str) -> reqwest::Response {
    d.http()
        .get(d.endpoint(&format!("/v1/volumes/{volume}/files/content")))
        .query(&[("path", path)])
        .send()
        .await
        .expect("GET volume file")
}

/// `PUT` a volume file's content, making its parents.
pub async fn put_volume_file(
    d: &Daemon,
    volume: &str,
    path: &str,
    body: &'static [u8],
) -> reqwest::Response {
    d.http()
        .put(d.endpoint(&format!("/v1/volumes/{volume}/files/content")))
        .query(&[("path", path), ("parents", "true")])
        .body(body)
        .send()
        .await
        .expect("PUT volume file")
}
