//! `/v1/api-keys`: mint, list and revoke the keys every surface accepts (admin keys only: the router
//! layers [`crate::auth::admin_only`] over these routes).
//!
//! - `POST /v1/api-keys {name, scope}` answers 201 with the key's secret, the one time it is shown
//!   (`e2b_` + 40 hex digits, which the E2B SDKs take as `E2B_API_KEY`); 400 for a bad name or scope.
//!   It does not honour `Idempotency-Key`: a replay would need the secret stored. A retried create
//!   makes a second key; the first can be deleted.
//! - `GET /v1/api-keys` lists every key without secrets (id, name, scope, prefix, created time).
//! - `DELETE /v1/api-keys/{id}` answers 204; the key is a 401 from the next request on. 404 for an
//!   unknown id, 409 for the daemon's configured admin token.

use crate::error::{parse_json, Error};
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use sandboxd_api_types as api;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::Service;
use sandboxd_store::{ApiToken, KeyScope};

fn scope_to_api(scope: KeyScope) -> api::KeyScope {
    match scope {
        KeyScope::Admin => api::KeyScope::Admin,
        KeyScope::User => api::KeyScope::User,
    }
}

fn to_api(key: &ApiToken) -> api::ApiKey {
    api::ApiKey {
        id: key.id.0.clone(),
        name: key.name.clone(),
        scope: scope_to_api(key.scope),
        prefix: (!key.prefix.is_empty()).then(|| key.prefix.clone()),
        configured: key.configured,
        created_at: rfc3339(key.created_at),
    }
}

/// Create an API key; the answer is the only one that carries its secret.
#[utoipa::path(post, path = "/v1/api-keys", request_body = api::CreateApiKey,
    responses((status = 201, body = api::CreatedApiKey), (status = 400, body = api::ApiError, description = "a bad name or scope, or not a JSON object"),
              (status = 401, body = api::ApiError, description = "no key, or one that is not accepted"), (status = 403, body = api::ApiError, description = "a user key")))]
pub async fn create(
    State(service): State<Service>,
    body: Bytes,
) -> Result<(StatusCode, Json<api::CreatedApiKey>), Error> {
    let req: api::CreateApiKey = parse_json(&body)?;
    let scope = match req.scope {
        api::KeyScope::Admin => KeyScope::Admin,
        api::KeyScope::User => KeyScope::User,
    };
    let created = service.create_api_key(req.name, scope).await?;
    let key = api::CreatedApiKey {
        api_key: api::ApiKey {
            id: created.id.0.clone(),
            name: created.name.clone(),
            scope: scope_to_api(created.scope),
            prefix: Some(created.prefix.clone()),
            configured: false,
            created_at: rfc3339(created.created_at),
        },
        key: created.token.clone(),
    };
    Ok((StatusCode::CREATED, Json(key)))
}

/// List the API keys, oldest first, without their secrets.
#[utoipa::path(get, path = "/v1/api-keys",
    responses((status = 200, body = api::ApiKeyList), (status = 401, body = api::ApiError, description = "no key, or one that is not accepted"),
              (status = 403, body = api::ApiError, description = "a user key")))]
pub async fn list(State(service): State<Service>) -> Result<Json<api::ApiKeyList>, Error> {
    let keys = service.list_api_keys().await?;
    Ok(Json(api::ApiKeyList {
        api_keys: keys.iter().map(to_api).collect(),
    }))
}

/// Revoke an API key: the next request with it is a 401.
#[utoipa::path(delete, path = "/v1/api-keys/{id}", params(("id" = String, Path)),
    responses((status = 204), (status = 401, body = api::ApiError, description = "no key, or one that is not accepted"),
              (status = 403, body = api::ApiError, description = "a user key"), (status = 404, body = api::ApiError, description = "no such key"),
              (status = 409, body = api::ApiError, description = "the daemon's configured admin token")))]
pub async fn delete(
    State(service): State<Service>,
    Path(id): Path<String>,
) -> Result<StatusCode, Error> {
    service.revoke_api_key(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}
