//! The daemon's `Server-Timing` header: the steps of the flow that served a call, with how long
//! each took ([`Timed`], from the `*_timed` calls), for breakdowns such as `bench`'s.

use crate::{Client, ClientError};
use reqwest::RequestBuilder;
use serde::de::DeserializeOwned;

/// An answer with the steps the daemon timed while making it.
#[derive(Debug, Clone)]
pub struct Timed<T> {
    /// The answer.
    pub value: T,
    /// Each step's name and milliseconds, in the order the daemon took them.
    pub steps: Vec<(String, f64)>,
}

/// Reads a `Server-Timing` value into (name, milliseconds) pairs; an entry without a well-formed
/// `dur` is skipped.
pub fn parse(value: &str) -> Vec<(String, f64)> {
    value
        .split(',')
        .filter_map(|entry| {
            let mut params = entry.trim().split(';');
            let name = params.next()?.trim();
            let dur = params.find_map(|p| p.trim().strip_prefix("dur="))?;
            let ms: f64 = dur.trim().parse().ok()?;
            (!name.is_empty() && ms.is_finite()).then(|| (name.to_string(), ms))
        })
        .collect()
}

impl Client {
    /// Sends and decodes a JSON success body, with the steps its `Server-Timing` header names.
    pub(crate) async fn send_json_timed<T: DeserializeOwned>(
        &self,
        request: RequestBuilder,
        what: &'static str,
    ) -> Result<Timed<T>, ClientError> {
        let response = self.send(request).await?;
        let steps = steps(&response);
        let body = response.bytes().await.map_err(ClientError::Transport)?;
        let value =
            serde_json::from_slice(&body).map_err(|source| ClientError::Decode { what, source })?;
        Ok(Timed { value, steps })
    }

    /// Sends a call whose success has no body; the steps its `Server-Timing` header names.
    pub(crate) async fn send_timed(
        &self,
        request: RequestBuilder,
    ) -> Result<Timed<()>, ClientError> {
        let response = self.send(request).await?;
        Ok(Timed {
            value: (),
            steps: steps(&response),
        })
    }
}

/// The steps `response`'s `Server-Timing` headers name.
fn steps(response: &reqwest::Response) -> Vec<(String, f64)> {
    response
        .headers()
        .get_all("server-timing")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_read_in_order_and_malformed_ones_skipped() {
        let parsed = parse("a;dur=1.5, b, c;desc=x, d;dur=zz, ;dur=2, e;desc=y;dur=3, f;dur=NaN");
        assert_eq!(parsed, [("a".to_string(), 1.5), ("e".to_string(), 3.0)]);
    }
}
