//! Who may reach a sandbox's ports through the proxy, and the links that open them.
//!
//! Contract:
//! - A *public* sandbox (the default on `/v1` and E2B's API) is reached by anyone who has its URL.
//!   A sandbox created with `network.allowPublicTraffic: false` (Daytona's default, its `public:
//!   false`) or made private later ([`Service::set_public`]) admits a request to one of its ports
//!   only when it carries its *traffic token* (header `X-Daytona-Preview-Token`, or E2B's
//!   `e2b-traffic-access-token`), an API key of the daemon (`Authorization: Bearer`), or arrives
//!   through a signed link; anything else is a 401. The agent's own port is never gated here: the
//!   agent's token gates it.
//! - The traffic token is derived from the sandbox's agent token (a SHA-256 under a fixed label):
//!   stable for the sandbox's life, different for every sandbox, stored nowhere, and no way back to
//!   the agent token.
//! - A signed link ([`Service::sign_preview`]) is a random token stored with its sandbox, port and
//!   expiry (`sandboxd_store::previews`); its URL puts the token where a sandbox id goes
//!   (`{port}-{token}.{domain}`), so it works without headers, for that one port, until it expires
//!   or is expired ([`Service::expire_preview`]).

use crate::ports::AGENT_PORT;
use crate::{Service, ServiceError};
use http::HeaderMap;
use sandboxd_proxy::{RouteError, Target};
use sandboxd_store::previews::PreviewLink;
use sandboxd_store::unix_millis_now;
use sha2::{Digest, Sha256};
use std::time::Duration;
use subtle::ConstantTimeEq;

/// The header Daytona's SDK sends the traffic token in.
pub const DAYTONA_TOKEN_HEADER: &str = "x-daytona-preview-token";
/// The header E2B's SDK sends it in.
pub const E2B_TOKEN_HEADER: &str = "e2b-traffic-access-token";
/// How long a signed link works when its maker names no time (Daytona's default).
pub const DEFAULT_LINK_LIFETIME: Duration = Duration::from_secs(60);
/// The longest a signed link may work.
pub const MAX_LINK_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// What every signed link's token starts with (sandbox ids start with `sb`).
const LINK_PREFIX: &str = "pv";
/// How many random characters follow [`LINK_PREFIX`] in a link's token.
const LINK_SECRET_LEN: usize = 30;

/// The sandbox a signed link's token names: a token is `pv{secret}-{sandbox id}`, so a node that
/// did not make the link can still tell which sandbox (and so which node) it is for. The secret
/// alone makes it valid, checked by the node that stored it.
pub fn link_sandbox(token: &str) -> Option<&str> {
    let rest = token.strip_prefix(LINK_PREFIX)?;
    let (secret, id) = rest.split_at_checked(LINK_SECRET_LEN)?;
    let id = id.strip_prefix('-')?;
    (secret.bytes().all(|b| b.is_ascii_alphanumeric()) && !id.is_empty()).then_some(id)
}

/// A port's preview: its URL and the token a request to it carries when the sandbox is private.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    pub sandbox_id: String,
    pub url: String,
    pub token: String,
}

/// A signed link to a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedPreview {
    pub sandbox_id: String,
    pub port: u16,
    pub token: String,
    pub url: String,
    pub expires_at: i64,
}

/// The traffic token of the sandbox whose agent token is `agent_token`.
pub fn traffic_token(agent_token: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"sandboxd traffic token\0")
        .chain_update(agent_token.as_bytes())
        .finalize();
    hex::encode(&digest[..16])
}

fn port_of(port: u32) -> Result<u16, ServiceError> {
    u16::try_from(port).ok().filter(|p| *p > 0).ok_or_else(|| {
        ServiceError::InvalidRequest(format!("port must be from 1 to 65535, got {port}"))
    })
}

/// Whether a stored `network` posture says the sandbox is public.
pub fn is_public(network: &serde_json::Value) -> bool {
    network.get("allowPublicTraffic") != Some(&serde_json::Value::Bool(false))
}

impl Service {
    /// Makes sandbox `key` public or private (see the module's contract).
    pub async fn set_public(
        &self,
        key: &str,
        public: bool,
    ) -> Result<sandboxd_store::Sandbox, ServiceError> {
        let sandbox = self.get(key).await?;
        let id = sandbox.id.clone();
        self.writer()
            .write(move |tx| tx.set_public_traffic(&id, public, unix_millis_now()))
            .await?;
        // The proxy's cached view of it carries the flag.
        self.evict_endpoint(&sandbox.id);
        self.get(&sandbox.id).await
    }

    /// The preview of `port` of sandbox `key`.
    pub async fn preview(&self, key: &str, port: u32) -> Result<Preview, ServiceError> {
        let port = port_of(port)?;
        let sandbox = self.get(key).await?;
        Ok(Preview {
            url: self.public_url(&sandbox.id, port),
            token: traffic_token(&sandbox.agent_token),
            sandbox_id: sandbox.id,
        })
    }

    /// A signed link to `port` of sandbox `key`, working for `lifetime` (default
    /// [`DEFAULT_LINK_LIFETIME`], at most [`MAX_LINK_LIFETIME`]).
    pub async fn sign_preview(
        &self,
        key: &str,
        port: u32,
        lifetime: Option<Duration>,
    ) -> Result<SignedPreview, ServiceError> {
        let port = port_of(port)?;
        let lifetime = lifetime.unwrap_or(DEFAULT_LINK_LIFETIME);
        if lifetime.is_zero() || lifetime > MAX_LINK_LIFETIME {
            return Err(ServiceError::InvalidRequest(format!(
                "a signed link works for 1 second to {} seconds, not {}",
                MAX_LINK_LIFETIME.as_secs(),
                lifetime.as_secs()
            )));
        }
        let sandbox = self.get(key).await?;
        let now = unix_millis_now();
        let link = PreviewLink {
            token: format!(
                "{}-{}",
                crate::sandboxes::random_id(LINK_PREFIX, LINK_SECRET_LEN),
                sandbox.id
            ),
            sandbox_id: sandbox.id.clone(),
            port,
            expires_at: now.saturating_add(lifetime.as_millis() as i64),
        };
        let stored = link.clone();
        self.writer()
            .write(move |tx| tx.insert_preview_link(&stored, now))
            .await?;
        Ok(SignedPreview {
            url: self.public_url(&link.token, port),
            sandbox_id: link.sandbox_id,
            port,
            token: link.token,
            expires_at: link.expires_at,
        })
    }

    /// Ends signed link `token` of `port` of sandbox `key`.
    pub async fn expire_preview(
        &self,
        key: &str,
        port: u32,
        token: &str,
    ) -> Result<(), ServiceError> {
        let port = port_of(port)?;
        let sandbox = self.get(key).await?;
        let token = token.to_string();
        let expired = self
            .writer()
            .write(move |tx| tx.expire_preview_link(&sandbox.id, port, &token))
            .await?;
        if expired {
            Ok(())
        } else {
            Err(ServiceError::NotFound(format!(
                "no signed link of port {port} has that token"
            )))
        }
    }

    /// The proxy's gate ([`sandboxd_proxy::Resolver::admit`]), as the module's contract says.
    pub(crate) async fn admit_request(
        &self,
        target: Target,
        headers: &HeaderMap,
    ) -> Result<Target, RouteError> {
        let unavailable = |e: sandboxd_store::StoreError| RouteError::Unavailable(e.to_string());
        if target.sandbox_id.starts_with(LINK_PREFIX) {
            let token = target.sandbox_id.clone();
            let link = self
                .reader()
                .read(move |tx| tx.preview_link(&token, unix_millis_now()))
                .await
                .map_err(unavailable)?;
            return match link {
                Some(link) if link.port == target.port => Ok(Target {
                    sandbox_id: link.sandbox_id,
                    port: link.port,
                }),
                _ => Err(RouteError::Unauthorized(
                    "this preview link is not valid (expired, or for another port)".into(),
                )),
            };
        }
        if target.port == AGENT_PORT {
            return Ok(target);
        }
        let (public, agent_token) = match self.cached_endpoint(&target.sandbox_id) {
            Some(endpoint) => (endpoint.public, endpoint.token.clone()),
            None => {
                let id = target.sandbox_id.clone();
                let row = self
                    .reader()
                    .read_by_key(move |tx| tx.get_sandbox_by_id(&id))
                    .await
                    .map_err(unavailable)?;
                match row {
                    Some(s) => (is_public(&s.network), s.agent_token),
                    // Unknown: the upstream lookup answers that, as it always has.
                    None => return Ok(target),
                }
            }
        };
        if public || self.carries_credentials(headers, &agent_token).await {
            return Ok(target);
        }
        Err(RouteError::Unauthorized(format!(
            "sandbox {} is not public: send its preview token in the {DAYTONA_TOKEN_HEADER} header \
             (or {E2B_TOKEN_HEADER}), an API key as Authorization: Bearer, or use a signed link",
            target.sandbox_id
        )))
    }

    async fn carries_credentials(&self, headers: &HeaderMap, agent_token: &str) -> bool {
        let expected = traffic_token(agent_token);
        for name in [DAYTONA_TOKEN_HEADER, E2B_TOKEN_HEADER] {
            if let Some(sent) = headers.get(name) {
                if bool::from(sent.as_bytes().ct_eq(expected.as_bytes())) {
                    return true;
                }
            }
        }
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match bearer {
            Some(key) => matches!(self.verify_api_key(key.trim()).await, Ok(Some(_))),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_tokens_are_per_sandbox_and_not_the_agent_token() {
        let a = traffic_token("agent-token-a");
        assert_eq!(a, traffic_token("agent-token-a"), "stable");
        assert_ne!(a, traffic_token("agent-token-b"));
        assert_eq!(a.len(), 32);
        assert!(!a.contains("agent"));
    }

    #[test]
    fn the_posture_is_public_unless_it_says_otherwise() {
        assert!(is_public(&serde_json::json!({"egress": true})));
        assert!(is_public(&serde_json::json!({"allowPublicTraffic": true})));
        assert!(!is_public(
            &serde_json::json!({"allowPublicTraffic": false})
        ));
    }

    #[test]
    fn ports_are_one_to_65535() {
        assert_eq!(port_of(8000).unwrap(), 8000);
        for bad in [0, 65536, u32::MAX] {
            assert!(port_of(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn link_tokens_never_look_like_sandbox_ids() {
        let id = crate::sandboxes::random_id("sb", 14);
        assert!(!id.starts_with(LINK_PREFIX));
    }

    #[test]
    fn a_link_token_names_its_sandbox() {
        let secret = crate::sandboxes::random_id(LINK_PREFIX, LINK_SECRET_LEN);
        assert_eq!(link_sandbox(&format!("{secret}-sbabc")), Some("sbabc"));
        assert_eq!(link_sandbox(&secret), None, "no sandbox named");
        assert_eq!(link_sandbox(&format!("{secret}-")), None);
        assert_eq!(link_sandbox("pvshort-sbabc"), None);
        assert_eq!(link_sandbox("sbabc"), None);
        assert_eq!(link_sandbox(""), None);
        assert_eq!(link_sandbox("pvé"), None, "no panic on a char boundary");
    }
}
