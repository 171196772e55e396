//! Daytona's inactivity intervals, onto the service's idle policies ([`sandboxd_service::idle`]):
//! `autoStopInterval` (minutes idle before a real stop; 0 never, default 15), `autoDeleteInterval`
//! (minutes stopped before a delete; negative never, the default; 0 at the stop) and
//! `autoArchiveInterval` (kept and reported: a stopped sandbox's filesystem stays where it is).
//! Routes: `POST /api/sandbox/{idOrName}/autostop|autodelete|autoarchive/{minutes}` → 200 Sandbox,
//! `POST /api/sandbox/{id}/last-activity` → 201 (the SDK's `refresh_activity`); and the time to live
//! (`POST /api/sandbox/{idOrName}/ttl/{minutes}`, the service's deadline: deleted at its end whatever
//! its state).

use super::control::{describe, toolbox_url};
use super::error::DaytonaError;
use super::models::{DaytonaSandbox, MINUTE_MS};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use sandboxd_service::Service;
use sandboxd_store::IdlePolicy;

/// Daytona's default auto-stop interval, minutes.
pub const DEFAULT_AUTO_STOP_MINUTES: i64 = 15;
/// Daytona's default auto-archive interval (7 days), minutes; also what 0 means.
pub const DEFAULT_AUTO_ARCHIVE_MINUTES: i64 = 7 * 24 * 60;
/// The longest interval taken, minutes (a year).
const MAX_MINUTES: i64 = 366 * 24 * 60;

/// The policy of a create's intervals (each `None` takes Daytona's default).
pub fn policy_of(
    stop: Option<i64>,
    delete: Option<i64>,
    archive: Option<i64>,
) -> Result<IdlePolicy, DaytonaError> {
    let stop = stop.unwrap_or(DEFAULT_AUTO_STOP_MINUTES);
    let delete = delete.unwrap_or(-1);
    let archive = match archive.unwrap_or(0) {
        0 => DEFAULT_AUTO_ARCHIVE_MINUTES,
        m => m,
    };
    for (what, minutes) in [("autoStopInterval", stop), ("autoArchiveInterval", archive)] {
        if !(0..=MAX_MINUTES).contains(&minutes) {
            return Err(DaytonaError::bad_request(format!(
                "{what} must be between 0 and {MAX_MINUTES} minutes (got {minutes})"
            )));
        }
    }
    if delete > MAX_MINUTES {
        return Err(DaytonaError::bad_request(format!(
            "autoDeleteInterval must be at most {MAX_MINUTES} minutes, or negative for never (got {delete})"
        )));
    }
    Ok(IdlePolicy {
        stop_after_ms: stop * MINUTE_MS,
        delete_after_ms: if delete < 0 { -1 } else { delete * MINUTE_MS },
        archive_after_ms: archive * MINUTE_MS,
    })
}

/// Which interval a route sets.
#[derive(Clone, Copy)]
enum Interval {
    Stop,
    Delete,
    Archive,
}

async fn set(
    service: Service,
    key: String,
    minutes: String,
    headers: HeaderMap,
    which: Interval,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let minutes: i64 = minutes.parse().map_err(|_| {
        DaytonaError::bad_request(format!("{minutes:?} is not a whole number of minutes"))
    })?;
    let sandbox = service.get(&key).await?;
    let current = service.idle_policy(&sandbox.id).await?;
    let (mut stop, mut delete, mut archive) = match current {
        Some(p) => (
            Some(super::models::minutes(p.stop_after_ms)),
            Some(super::models::minutes(p.delete_after_ms)),
            Some(super::models::minutes(p.archive_after_ms)),
        ),
        None => (Some(0), None, None),
    };
    match which {
        Interval::Stop => stop = Some(minutes),
        Interval::Delete => delete = Some(minutes),
        Interval::Archive => archive = Some(minutes),
    }
    let policy = policy_of(stop, delete, archive)?;
    let sandbox = service.set_idle_policy(&sandbox.id, policy).await?;
    Ok(Json(
        describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}

/// `POST /api/sandbox/{idOrName}/autostop/{minutes}`.
pub async fn autostop(
    State(service): State<Service>,
    Path((key, minutes)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    set(service, key, minutes, headers, Interval::Stop).await
}

/// `POST /api/sandbox/{idOrName}/autodelete/{minutes}`.
pub async fn autodelete(
    State(service): State<Service>,
    Path((key, minutes)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    set(service, key, minutes, headers, Interval::Delete).await
}

/// `POST /api/sandbox/{idOrName}/autoarchive/{minutes}`.
pub async fn autoarchive(
    State(service): State<Service>,
    Path((key, minutes)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    set(service, key, minutes, headers, Interval::Archive).await
}

/// `POST /api/sandbox/{idOrName}/ttl/{minutes}`: the sandbox is deleted that long from now,
/// whatever its state (`autoDestroyAt`); 0 drops its time to live. Fractions of a minute are taken.
pub async fn ttl(
    State(service): State<Service>,
    Path((key, minutes)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    let ttl = time_to_live(&minutes)?;
    let sandbox = service.set_time_to_live(&key, ttl).await?;
    Ok(Json(
        describe(&service, &sandbox, &toolbox_url(&headers)).await?,
    ))
}

/// A time to live in minutes (`None` for 0); negative, non-numeric or over a year is refused.
fn time_to_live(minutes: &str) -> Result<Option<std::time::Duration>, DaytonaError> {
    match minutes.trim().parse::<f64>() {
        Ok(0.0) => Ok(None),
        Ok(m) if m > 0.0 && m <= MAX_MINUTES as f64 => {
            Ok(Some(std::time::Duration::from_secs_f64(m * 60.0)))
        }
        _ => Err(DaytonaError::bad_request(format!(
            "the time to live must be from 0 to {MAX_MINUTES} minutes (got {minutes:?})"
        ))),
    }
}

/// `POST /api/sandbox/{id}/last-activity`: 201, the idle clock restarted.
pub async fn last_activity(
    State(service): State<Service>,
    Path(key): Path<String>,
) -> Result<StatusCode, DaytonaError> {
    service.record_activity(&key).await?;
    Ok(StatusCode::CREATED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_to_live_is_minutes_zero_drops_it_and_nonsense_is_refused() {
        assert_eq!(time_to_live("0").unwrap(), None);
        assert_eq!(
            time_to_live("1.5").unwrap(),
            Some(std::time::Duration::from_secs(90))
        );
        for bad in ["-1", "x", "NaN", "inf", "1e9"] {
            assert!(time_to_live(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn intervals_take_daytonas_defaults_and_meanings() {
        let p = policy_of(None, None, None).unwrap();
        assert_eq!(p.stop_after_ms, 15 * MINUTE_MS);
        assert_eq!(p.delete_after_ms, -1, "never");
        assert_eq!(p.archive_after_ms, DEFAULT_AUTO_ARCHIVE_MINUTES * MINUTE_MS);
        let p = policy_of(Some(0), Some(0), Some(30)).unwrap();
        assert_eq!(
            (p.stop_after_ms, p.delete_after_ms),
            (0, 0),
            "never stops; deleted at a stop"
        );
        assert_eq!(p.archive_after_ms, 30 * MINUTE_MS);
        assert_eq!(policy_of(None, Some(-7), None).unwrap().delete_after_ms, -1);
        assert!(policy_of(Some(-1), None, None).is_err());
        assert!(policy_of(None, None, Some(-1)).is_err());
        assert!(policy_of(Some(MAX_MINUTES + 1), None, None).is_err());
    }
}
