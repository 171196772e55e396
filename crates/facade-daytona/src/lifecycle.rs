//! Daytona's inactivity intervals, onto the service's idle policies ([`sandboxd_service::idle`]):
//! `autoStopInterval` (minutes idle before a real stop; 0 never, default 15 unless the sandbox
//! pauses), `autoPauseInterval` (minutes idle before a pause that keeps its memory; 0 never, the
//! default; at most one of the two is non-zero, and a setter that turns one on turns the other
//! off), `autoDeleteInterval`
//! (minutes stopped before a delete; negative never, the default; 0 at the stop) and
//! `autoArchiveInterval` (kept and reported: a stopped sandbox's filesystem stays where it is).
//! Routes: `POST /api/sandbox/{idOrName}/autostop|autopause|autodelete|autoarchive/{minutes}` → 200
//! Sandbox,
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

/// A sandbox's inactivity intervals, minutes; `None` takes Daytona's default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Intervals {
    pub stop: Option<i64>,
    pub pause: Option<i64>,
    pub delete: Option<i64>,
    pub archive: Option<i64>,
}

/// The policy of `intervals`.
pub fn policy_of(intervals: Intervals) -> Result<IdlePolicy, DaytonaError> {
    let pause = intervals.pause.unwrap_or(0);
    // A sandbox that pauses does not stop as well: auto-stop's default gives way.
    let default_stop = if pause > 0 {
        0
    } else {
        DEFAULT_AUTO_STOP_MINUTES
    };
    let stop = intervals.stop.unwrap_or(default_stop);
    let delete = intervals.delete.unwrap_or(-1);
    let archive = match intervals.archive.unwrap_or(0) {
        0 => DEFAULT_AUTO_ARCHIVE_MINUTES,
        m => m,
    };
    for (what, minutes) in [
        ("autoStopInterval", stop),
        ("autoPauseInterval", pause),
        ("autoArchiveInterval", archive),
    ] {
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
    if stop > 0 && pause > 0 {
        return Err(DaytonaError::bad_request(
            "autoStopInterval and autoPauseInterval are mutually exclusive: set one of them to 0",
        ));
    }
    if pause > 0 && delete == 0 {
        return Err(DaytonaError::bad_request(
            "an ephemeral sandbox (autoDeleteInterval 0) cannot pause: set autoPauseInterval to 0",
        ));
    }
    Ok(IdlePolicy {
        stop_after_ms: stop * MINUTE_MS,
        pause_after_ms: pause * MINUTE_MS,
        delete_after_ms: if delete < 0 { -1 } else { delete * MINUTE_MS },
        archive_after_ms: archive * MINUTE_MS,
    })
}

/// Which interval a route sets.
#[derive(Clone, Copy)]
enum Interval {
    Stop,
    Pause,
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
    let minutes_of = super::models::minutes;
    let mut intervals = match current {
        Some(p) => Intervals {
            stop: Some(minutes_of(p.stop_after_ms)),
            pause: Some(minutes_of(p.pause_after_ms)),
            delete: Some(minutes_of(p.delete_after_ms)),
            archive: Some(minutes_of(p.archive_after_ms)),
        },
        None => Intervals {
            stop: Some(0),
            ..Default::default()
        },
    };
    // Stopping and pausing exclude each other: turning one on turns the other off.
    match which {
        Interval::Stop => {
            intervals.stop = Some(minutes);
            if minutes > 0 {
                intervals.pause = Some(0);
            }
        }
        Interval::Pause => {
            intervals.pause = Some(minutes);
            if minutes > 0 {
                intervals.stop = Some(0);
            }
        }
        Interval::Delete => intervals.delete = Some(minutes),
        Interval::Archive => intervals.archive = Some(minutes),
    }
    let policy = policy_of(intervals)?;
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

/// `POST /api/sandbox/{idOrName}/autopause/{minutes}`.
pub async fn autopause(
    State(service): State<Service>,
    Path((key, minutes)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Json<DaytonaSandbox>, DaytonaError> {
    set(service, key, minutes, headers, Interval::Pause).await
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
        let of = |stop, pause, delete, archive| {
            policy_of(Intervals {
                stop,
                pause,
                delete,
                archive,
            })
        };
        let p = of(None, None, None, None).unwrap();
        assert_eq!(p.stop_after_ms, 15 * MINUTE_MS);
        assert_eq!(p.pause_after_ms, 0, "never pauses");
        assert_eq!(p.delete_after_ms, -1, "never");
        assert_eq!(p.archive_after_ms, DEFAULT_AUTO_ARCHIVE_MINUTES * MINUTE_MS);
        let p = of(Some(0), None, Some(0), Some(30)).unwrap();
        assert_eq!(
            (p.stop_after_ms, p.delete_after_ms),
            (0, 0),
            "never stops; deleted at a stop"
        );
        assert_eq!(p.archive_after_ms, 30 * MINUTE_MS);
        assert_eq!(of(None, None, Some(-7), None).unwrap().delete_after_ms, -1);
        assert!(of(Some(-1), None, None, None).is_err());
        assert!(of(None, Some(-1), None, None).is_err());
        assert!(of(None, None, None, Some(-1)).is_err());
        assert!(of(Some(MAX_MINUTES + 1), None, None, None).is_err());
        // A pausing sandbox does not stop by default; asking both, or an ephemeral one to pause,
        // is refused.
        let p = of(None, Some(60), None, None).unwrap();
        assert_eq!((p.stop_after_ms, p.pause_after_ms), (0, 60 * MINUTE_MS));
        assert!(of(Some(15), Some(60), None, None).is_err());
        assert!(of(None, Some(60), Some(0), None).is_err());
    }
}
