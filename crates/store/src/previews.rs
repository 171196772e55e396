//! Who may reach a sandbox's ports through the proxy: its traffic posture (public or not, kept in
//! its `network` as `allowPublicTraffic: false`) and its signed preview links.
//!
//! Contract:
//! - A signed link is a row of `preview_links`: a token (the primary key, so one token names one
//!   sandbox port), the sandbox and port it opens, and when it stops working. A link is removed with
//!   its sandbox (`ON DELETE CASCADE`), or by [`WriteTx::expire_preview_link`], after which its token
//!   opens nothing.
//! - [`ReadTx::preview_link`] answers only a link whose time has not passed; links past their time are
//!   dropped when their sandbox gets a new one.

use rusqlite::{params, OptionalExtension};

use crate::error::{unknown_sandbox, Result};
use crate::{ReadTx, UnixMillis, WriteTx};

/// A signed preview link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewLink {
    pub token: String,
    pub sandbox_id: String,
    pub port: u16,
    pub expires_at: UnixMillis,
}

impl ReadTx<'_> {
    /// The link `token` names, if it still works at `now`.
    pub fn preview_link(&self, token: &str, now: UnixMillis) -> Result<Option<PreviewLink>> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT token, sandbox_id, port, expires_at FROM preview_links
                 WHERE token = ?1 AND expires_at > ?2",
            )?
            .query_row(params![token, now], |r| {
                Ok(PreviewLink {
                    token: r.get(0)?,
                    sandbox_id: r.get(1)?,
                    port: r.get(2)?,
                    expires_at: r.get(3)?,
                })
            })
            .optional()?)
    }
}

impl WriteTx<'_> {
    /// Stores `link`, dropping its sandbox's links whose time passed before `now`.
    /// [`crate::StoreError::NotFound`] for an unknown sandbox.
    pub fn insert_preview_link(&mut self, link: &PreviewLink, now: UnixMillis) -> Result<()> {
        self.conn()
            .prepare_cached("DELETE FROM preview_links WHERE sandbox_id = ?1 AND expires_at <= ?2")?
            .execute(params![link.sandbox_id, now])?;
        self.conn()
            .prepare_cached(
                "INSERT INTO preview_links (token, sandbox_id, port, expires_at) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![link.token, link.sandbox_id, link.port, link.expires_at])
            .map_err(unknown_sandbox(&link.sandbox_id))?;
        Ok(())
    }

    /// Ends link `token` of port `port` of sandbox `sandbox_id`; whether there was one.
    pub fn expire_preview_link(
        &mut self,
        sandbox_id: &str,
        port: u16,
        token: &str,
    ) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "DELETE FROM preview_links WHERE token = ?1 AND sandbox_id = ?2 AND port = ?3",
            )?
            .execute(params![token, sandbox_id, port])?;
        Ok(n == 1)
    }

    /// Makes sandbox `id` public (anyone reaches its ports through the proxy) or not; whether it
    /// exists.
    pub fn set_public_traffic(&mut self, id: &str, public: bool, now: UnixMillis) -> Result<bool> {
        let n = self
            .conn()
            .prepare_cached(
                "UPDATE sandboxes SET updated_at = ?3, network = CASE WHEN ?2
                     THEN json_remove(network, '$.allowPublicTraffic')
                     ELSE json_set(network, '$.allowPublicTraffic', json('false')) END
                 WHERE id = ?1",
            )?
            .execute(params![id, public, now])?;
        Ok(n == 1)
    }
}

#[cfg(test)]
mod tests {
    use crate::previews::PreviewLink;
    use crate::test_util::{open_temp, seed_sandboxes};
    use crate::StoreError;

    fn link(token: &str, sandbox: &str, expires_at: i64) -> PreviewLink {
        PreviewLink {
            token: token.into(),
            sandbox_id: sandbox.into(),
            port: 8000,
            expires_at,
        }
    }

    /// Invariant: a token names one sandbox port (`preview_links` primary key); it works until its
    /// time, until it is expired, or until its sandbox goes.
    #[tokio::test]
    async fn a_link_opens_its_port_until_its_time_its_expiry_or_its_sandbox_ends() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a", "b"]).await;
        let w = store.writer();
        w.write(|tx| {
            tx.insert_preview_link(&link("pv1", "a", 1_000), 0)?;
            tx.insert_preview_link(&link("pv2", "a", 5_000), 0)?;
            tx.insert_preview_link(&link("pv3", "b", 5_000), 0)
        })
        .await
        .unwrap();
        let again = w
            .write(|tx| tx.insert_preview_link(&link("pv1", "b", 9_000), 0))
            .await;
        assert!(matches!(again, Err(StoreError::Sqlite(_))), "{again:?}");
        let unknown = w
            .write(|tx| tx.insert_preview_link(&link("pv9", "nope", 9_000), 0))
            .await;
        assert!(
            matches!(unknown, Err(StoreError::NotFound { .. })),
            "{unknown:?}"
        );
        let r = store.reader();
        let found = |token: &'static str, now: i64| {
            let r = r.clone();
            async move { r.read(move |tx| tx.preview_link(token, now)).await.unwrap() }
        };
        assert_eq!(found("pv1", 999).await, Some(link("pv1", "a", 1_000)));
        assert_eq!(found("pv1", 1_000).await, None, "past its time");
        assert!(
            !w.write(|tx| tx.expire_preview_link("a", 9999, "pv2"))
                .await
                .unwrap(),
            "another port"
        );
        assert!(w
            .write(|tx| tx.expire_preview_link("a", 8000, "pv2"))
            .await
            .unwrap());
        assert_eq!(found("pv2", 0).await, None, "expired");
        w.write(|tx| tx.delete_sandbox("b")).await.unwrap();
        assert_eq!(found("pv3", 0).await, None, "its sandbox went");
    }

    #[tokio::test]
    async fn public_traffic_is_a_flag_of_the_network_posture() {
        let (_dir, store, _t) = open_temp();
        seed_sandboxes(&store, &["a"]).await;
        let w = store.writer();
        let network = |store: &crate::Store| {
            let r = store.reader().clone();
            async move {
                r.read(|tx| tx.get_sandbox_by_id("a"))
                    .await
                    .unwrap()
                    .unwrap()
                    .network
            }
        };
        let before = network(&store).await;
        assert!(w
            .write(|tx| tx.set_public_traffic("a", false, 7))
            .await
            .unwrap());
        let private = network(&store).await;
        assert_eq!(private["allowPublicTraffic"], false, "{private}");
        assert!(w
            .write(|tx| tx.set_public_traffic("a", true, 8))
            .await
            .unwrap());
        assert_eq!(network(&store).await, before);
        assert!(!w
            .write(|tx| tx.set_public_traffic("zz", true, 8))
            .await
            .unwrap());
    }
}
