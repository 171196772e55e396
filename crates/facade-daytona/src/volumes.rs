//! Daytona's volumes (`/api/volumes`: create, list, get by id or name, delete) onto the shared
//! volume flows ([`sandboxd_service::volumes`]); mounting them on create is [`super::control`]'s
//! `volumes` (`volumeId` — an id or a name —, `mountPath`, `subpath`).
//!
//! A volume here is ready as soon as its create answers (its directory is made before), so `state`
//! is always `ready` and the SDK's `get(create=True)` needs no wait.

use super::error::DaytonaError;
use super::models::ORGANIZATION;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use sandboxd_service::timestamps::rfc3339;
use sandboxd_service::Service;
use sandboxd_store::VolumeRecord;
use serde::{Deserialize, Serialize};

/// A volume as Daytona's `VolumeDto` describes it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeDto {
    pub id: String,
    pub name: String,
    pub organization_id: &'static str,
    pub state: &'static str,
    pub created_at: String,
    pub updated_at: String,
    pub last_used_at: Option<String>,
    pub error_reason: Option<String>,
}

impl VolumeDto {
    fn of(v: &VolumeRecord) -> Self {
        Self {
            id: v.id.clone(),
            name: v.name.clone(),
            organization_id: ORGANIZATION,
            state: "ready",
            created_at: rfc3339(v.created_at),
            updated_at: rfc3339(v.created_at),
            last_used_at: None,
            error_reason: None,
        }
    }
}

/// `POST /api/volumes`.
#[derive(Debug, Deserialize)]
struct CreateVolume {
    name: String,
}

/// `POST /api/volumes {name}`.
pub async fn create(
    State(service): State<Service>,
    body: Bytes,
) -> Result<Json<VolumeDto>, DaytonaError> {
    let req: CreateVolume = serde_json::from_slice(&body)
        .map_err(|e| DaytonaError::bad_request(format!("invalid body: {e}")))?;
    let volume = service.create_named_volume(req.name).await?;
    Ok(Json(VolumeDto::of(&volume)))
}

/// `GET /api/volumes`.
pub async fn list(State(service): State<Service>) -> Result<Json<Vec<VolumeDto>>, DaytonaError> {
    let volumes = service.list_volumes().await?;
    Ok(Json(volumes.iter().map(VolumeDto::of).collect()))
}

/// `GET /api/volumes/{volumeId}` and `GET /api/volumes/by-name/{name}`.
pub async fn get(
    State(service): State<Service>,
    Path(key): Path<String>,
) -> Result<Json<VolumeDto>, DaytonaError> {
    Ok(Json(VolumeDto::of(&service.get_volume(&key).await?)))
}

/// `DELETE /api/volumes/{volumeId}`: 409 while a sandbox mounts it.
pub async fn delete(
    State(service): State<Service>,
    Path(key): Path<String>,
) -> Result<StatusCode, DaytonaError> {
    service.delete_volume(&key).await?;
    Ok(StatusCode::OK)
}
