//! Daytona's language servers (`LspServer`), translated onto the service's flow
//! ([`sandboxd_service::lsp`]), at `/api/toolbox/{id}/lsp/…`:
//!
//! - `POST start` and `POST stop` `{languageId, pathToProject}` → 200;
//! - `POST did-open` and `POST did-close` `{languageId, pathToProject, uri}` → 200;
//! - `POST completions` `{languageId, pathToProject, uri, position: {line, character},
//!   context?}` → `{isIncomplete, items}`;
//! - `GET document-symbols?languageId&pathToProject&uri` and
//!   `GET workspacesymbols?query&languageId&pathToProject` → `[{name, kind, location}]`.
//!
//! A missing field is a 400 naming it; the rest of the contract is the flow's.

use super::error::DaytonaError;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use sandboxd_service::lsp::LspServer;
use sandboxd_service::Service;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerRequest {
    language_id: String,
    path_to_project: String,
    #[serde(default)]
    uri: Option<String>,
    #[serde(default)]
    position: Option<Position>,
    #[serde(default)]
    context: Option<Value>,
}

#[derive(Deserialize, serde::Serialize)]
struct Position {
    line: u32,
    character: u32,
}

/// A POST's body and the server it names.
async fn parse(
    service: &Service,
    id: &str,
    body: &Bytes,
) -> Result<(ServerRequest, LspServer), DaytonaError> {
    let req: ServerRequest = serde_json::from_slice(body)
        .map_err(|e| DaytonaError::bad_request(format!("invalid JSON body: {e}")))?;
    let server = server(
        service,
        id,
        Some(&req.language_id),
        Some(&req.path_to_project),
    )
    .await?;
    Ok((req, server))
}

fn required<'a>(value: Option<&'a str>, name: &str) -> Result<&'a str, DaytonaError> {
    value
        .filter(|v| !v.is_empty())
        .ok_or_else(|| DaytonaError::bad_request(format!("{name} is required")))
}

async fn server(
    service: &Service,
    id: &str,
    language: Option<&str>,
    project: Option<&str>,
) -> Result<LspServer, DaytonaError> {
    let language = required(language, "languageId")?;
    let project = required(project, "pathToProject")?;
    Ok(service.lsp_server(id, language, project).await?)
}

/// `POST start`.
async fn start(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, DaytonaError> {
    let (_, server) = parse(&service, &id, &body).await?;
    service.lsp_start(&id, &server).await?;
    Ok(StatusCode::OK)
}

/// `POST stop`.
async fn stop(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, DaytonaError> {
    let (_, server) = parse(&service, &id, &body).await?;
    service.lsp_stop(&id, &server).await?;
    Ok(StatusCode::OK)
}

/// `POST did-open`.
async fn did_open(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, DaytonaError> {
    let (req, server) = parse(&service, &id, &body).await?;
    let uri = required(req.uri.as_deref(), "uri")?;
    service.lsp_did_open(&id, &server, uri).await?;
    Ok(StatusCode::OK)
}

/// `POST did-close`.
async fn did_close(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<StatusCode, DaytonaError> {
    let (req, server) = parse(&service, &id, &body).await?;
    let uri = required(req.uri.as_deref(), "uri")?;
    service.lsp_did_close(&id, &server, uri).await?;
    Ok(StatusCode::OK)
}

/// `POST completions`.
async fn completions(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, DaytonaError> {
    let (req, server) = parse(&service, &id, &body).await?;
    let uri = required(req.uri.as_deref(), "uri")?;
    let position = req
        .position
        .ok_or_else(|| DaytonaError::bad_request("position is required"))?;
    let position = serde_json::to_value(position).unwrap_or_default();
    let list = service
        .lsp_completions(&id, &server, uri, position, req.context)
        .await?;
    Ok(Json(list))
}

type Params = Query<BTreeMap<String, String>>;

/// `GET document-symbols`.
async fn document_symbols(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<Json<Vec<Value>>, DaytonaError> {
    let uri = required(q.get("uri").map(String::as_str), "uri")?;
    let server = server(
        &service,
        &id,
        q.get("languageId").map(String::as_str),
        q.get("pathToProject").map(String::as_str),
    )
    .await?;
    Ok(Json(service.lsp_document_symbols(&id, &server, uri).await?))
}

/// `GET workspacesymbols`.
async fn workspace_symbols(
    State(service): State<Service>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Result<Json<Vec<Value>>, DaytonaError> {
    let query = q.get("query").map(String::as_str).unwrap_or("");
    let server = server(
        &service,
        &id,
        q.get("languageId").map(String::as_str),
        q.get("pathToProject").map(String::as_str),
    )
    .await?;
    Ok(Json(
        service.lsp_workspace_symbols(&id, &server, query).await?,
    ))
}

/// The language server routes.
pub fn router() -> Router<Service> {
    let t = "/api/toolbox/{id}/lsp";
    Router::new()
        .route(&format!("{t}/start"), post(start))
        .route(&format!("{t}/stop"), post(stop))
        .route(&format!("{t}/did-open"), post(did_open))
        .route(&format!("{t}/did-close"), post(did_close))
        .route(&format!("{t}/completions"), post(completions))
        .route(&format!("{t}/document-symbols"), get(document_symbols))
        .route(&format!("{t}/workspacesymbols"), get(workspace_symbols))
}
