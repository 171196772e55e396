//! `/v1` file routes beyond download, upload and list (which are in [`crate::v1`]).

use crate::error::Error;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use sandboxd_service::files::FileError;
use sandboxd_service::Service;

/// Delete a file or directory in the sandbox (`recursive=true` for a directory that is not empty).
#[utoipa::path(delete, path = "/v1/sandboxes/{id}/files",
    params(("id" = String, Path), ("path" = String, Query, description = "absolute path"),
        ("recursive" = Option<bool>, Query)),
    responses((status = 204), (status = 400, body = sandboxd_api_types::ApiError),
        (status = 401, body = sandboxd_api_types::ApiError), (status = 403, body = sandboxd_api_types::ApiError),
        (status = 404, body = sandboxd_api_types::ApiError)))]
pub async fn remove(
    State(service): State<Service>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<StatusCode, Error> {
    let query: Vec<(String, String)> =
        form_urlencoded::parse(raw.as_deref().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let get = |k: &str| {
        query
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let path = get("path").ok_or_else(|| Error::invalid("the query needs path=<absolute path>"))?;
    let recursive = match get("recursive") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(Error::invalid(format!(
                "recursive must be true or false, got {other:?}"
            )))
        }
    };
    service
        .remove_path(&id, path, recursive)
        .await
        .map_err(file_error)?;
    Ok(StatusCode::NO_CONTENT)
}

/// A file flow's failure as the native error.
fn file_error(e: FileError) -> Error {
    match e {
        FileError::NotFound(m) => Error::new(StatusCode::NOT_FOUND, "not_found", m),
        FileError::InvalidPath(m) | FileError::Invalid(m) => Error::invalid(m),
        FileError::Conflict(m) => Error::new(StatusCode::CONFLICT, "conflict", m),
        FileError::Denied(m) => Error::new(
            StatusCode::FORBIDDEN,
            "permission_denied",
            format!("permission denied: {m}"),
        ),
        FileError::Service(e) => e.into(),
    }
}
