//! The native `/v1/templates` handlers and `POST /v1/sandboxes/{id}/snapshot`: parse, call one
//! [`Service`] method, shape the answer. A template name in a path is percent-encoded when it holds
//! `/` or `:`.

use crate::error::{parse_json, Error};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine;
use sandboxd_api_types as api;
use sandboxd_service::builds::BuildSpec;
use sandboxd_service::templates::{template_to_api, StartCommands, TemplateSource};
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::Service;
use sandboxd_store::LogLine;
use sandboxd_surface::logs::log_stream;

/// Create a template from an image or a Dockerfile; answers at once, while it builds.
#[utoipa::path(post, path = "/v1/templates", request_body = api::CreateTemplate,
    responses((status = 202, body = api::Template), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 409, body = api::ApiError)))]
pub async fn create(
    State(service): State<Service>,
    body: Bytes,
) -> Result<(StatusCode, Json<api::Template>), Error> {
    let req: api::CreateTemplate = parse_json(&body)?;
    let source = match (req.image, req.dockerfile) {
        (Some(reference), None) => {
            if req.context.is_some() || req.build_args.is_some() {
                return Err(Error::invalid(
                    "context and buildArgs go with a dockerfile, not an image",
                ));
            }
            TemplateSource::Image { reference }
        }
        (None, Some(dockerfile)) => {
            let context = match req.context {
                Some(b64) => base64::engine::general_purpose::STANDARD
                    .decode(b64.as_bytes())
                    .map_err(|e| Error::invalid(format!("context is not base64: {e}")))?,
                None => Vec::new(),
            };
            TemplateSource::Dockerfile(BuildSpec {
                dockerfile,
                context,
                build_args: req.build_args.unwrap_or_default(),
            })
        }
        (None, None)
            if req.context.is_none()
                && req.build_args.is_none()
                && req.start_cmd.is_none()
                && req.ready_cmd.is_none()
                && sandboxd_service::builtin::find(&req.name).is_some() =>
        {
            let template = service.create_builtin_template(&req.name).await?;
            return Ok((StatusCode::ACCEPTED, Json(template_to_api(&template))));
        }
        _ => return Err(Error::invalid(
            "give exactly one of image and dockerfile (or only the name of a built-in template)",
        )),
    };
    let credentials = req.registry_auth.map(|a| sandboxd_images::Credentials {
        username: a.username,
        password: a.password,
    });
    let template = service
        .create_template(
            &req.name,
            source,
            credentials,
            StartCommands {
                start: req.start_cmd,
                ready: req.ready_cmd,
            },
            req.isolation.as_deref(),
        )
        .await?;
    Ok((StatusCode::ACCEPTED, Json(template_to_api(&template))))
}

/// List the templates.
#[utoipa::path(get, path = "/v1/templates",
    responses((status = 200, body = api::TemplateList), (status = 401, body = api::ApiError)))]
pub async fn list(State(service): State<Service>) -> Result<Json<api::TemplateList>, Error> {
    let templates = service.list_templates().await?;
    Ok(Json(api::TemplateList {
        templates: templates.iter().map(template_to_api).collect(),
    }))
}

/// One template.
#[utoipa::path(get, path = "/v1/templates/{name}", params(("name" = String, Path)),
    responses((status = 200, body = api::Template), (status = 401, body = api::ApiError),
              (status = 404, body = api::ApiError)))]
pub async fn get(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<Json<api::Template>, Error> {
    Ok(Json(template_to_api(&service.get_template(&name).await?)))
}

/// Delete a template; 409 while it builds or a sandbox made from it exists.
#[utoipa::path(delete, path = "/v1/templates/{name}", params(("name" = String, Path)),
    responses((status = 204), (status = 401, body = api::ApiError), (status = 404, body = api::ApiError),
              (status = 409, body = api::ApiError)))]
pub async fn delete(
    State(service): State<Service>,
    Path(name): Path<String>,
) -> Result<StatusCode, Error> {
    service.delete_template(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A template's build log as NDJSON `LogLine`s from `?offset=N` (default 0); with `?follow=true`
/// the stream stays open until the build has ended and every line was sent.
#[utoipa::path(get, path = "/v1/templates/{name}/logs",
    params(("name" = String, Path), ("offset" = Option<u64>, Query), ("follow" = Option<bool>, Query)),
    responses((status = 200, body = api::LogLine, content_type = "application/x-ndjson"),
              (status = 400, body = api::ApiError), (status = 401, body = api::ApiError),
              (status = 404, body = api::ApiError)))]
pub async fn logs(
    State(service): State<Service>,
    Path(name): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, Error> {
    let pairs: Vec<(String, String)> = raw
        .as_deref()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let param = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let offset = match param("offset") {
        // At most the largest int64, as the document says.
        Some(o) => o
            .parse::<i64>()
            .ok()
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| Error::invalid("offset must be a whole number (at most 2^63 - 1)"))?,
        None => 0,
    };
    let follow = match param("follow").as_deref() {
        None | Some("false") | Some("0") => false,
        Some("true") | Some("1") => true,
        Some(other) => {
            return Err(Error::invalid(format!(
                "follow must be true or false, not {other:?}"
            )))
        }
    };
    // Unknown templates are a 404 before the stream starts.
    service.get_template(&name).await?;
    let ndjson = |l: &LogLine| {
        let line = api::LogLine {
            seq: l.seq,
            line: l.line.clone(),
            at: rfc3339(l.at),
        };
        let mut chunk = serde_json::to_vec(&line).unwrap_or_default();
        chunk.push(b'\n');
        chunk
    };
    Ok((
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        log_stream(service, name, offset, follow, ndjson),
    )
        .into_response())
}

/// Turn a sandbox's filesystem into a template.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/snapshot", params(("id" = String, Path)),
    request_body = api::CreateSnapshot,
    responses((status = 201, body = api::Template), (status = 400, body = api::ApiError),
              (status = 401, body = api::ApiError), (status = 404, body = api::ApiError),
              (status = 409, body = api::ApiError)))]
pub async fn snapshot(
    State(service): State<Service>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<api::Template>), Error> {
    let req: api::CreateSnapshot = parse_json(&body)?;
    let template = service.snapshot(&id, &req.name).await?;
    Ok((StatusCode::CREATED, Json(template_to_api(&template))))
}
