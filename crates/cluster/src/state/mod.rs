//! The replicated state: what must be unique or agreed on cluster-wide, and the one function that
//! changes it, [`ClusterState::apply`].
//!
//! Contract:
//! - **Deterministic.** `apply` reads nothing but the state and the command: every time in a command
//!   was stamped by its proposer (`at_ms`), never read from the local clock, and every map is ordered.
//!   Every node applying the same log reaches the same state, so a snapshot is just this value.
//! - **First committed entry wins.** A name and a custom hostname map to at most one live sandbox, and
//!   an E2B create fingerprint to one node for its window. Which of two racing claims gets it is
//!   decided here, by log order; the loser learns it from the outcome of its own entry and writes no
//!   local row, or rolls back the one it wrote (the seed's "Hazard 2").
//! - **Lost nodes let go.** A node whose lease lapsed past the grace is marked lost with a new epoch
//!   ([`Command::MarkLost`]): its placements become [`PlacementState::Lost`] and their names and
//!   hostnames are released at once, in the same entry, as are the fingerprints routed to it. The node learns it from the log when it
//!   returns, destroys what it ran for them, and clears the mark for that epoch ([`Command::Recovered`]).
//!
//! The invariants are checked by `check_invariants`, which the unit tests (`tests.rs`) run after every entry.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};

/// A node's id in the cluster (derived from its daemon id).
pub type NodeId = u64;

/// Where a member is reached: its cluster RPC listener and its public API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// `host:port` of `--cluster-listen`.
    pub cluster_addr: String,
    /// `host:port` of the API listener (`--listen`), where requests are forwarded.
    pub api_addr: String,
}

/// What a node can still take, as it last reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// CPU not yet promised to sandboxes, in thousandths.
    pub cpu_millis: u64,
    /// Memory available, MiB.
    pub memory_mb: u64,
    /// Disk free under the data dir, MiB.
    pub disk_mb: u64,
    /// Network slots free.
    pub slots: u64,
}

/// A node as the log knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    /// Its addresses.
    pub member: Member,
    /// What it can take.
    pub capacity: Capacity,
    /// Until when its lease holds (proposer time, Unix ms).
    pub lease_until_ms: i64,
    /// How many times it was marked lost.
    pub epoch: u64,
    /// Whether it is marked lost now (for `epoch`), until it reports [`Command::Recovered`].
    pub lost: bool,
}

/// Where a placement stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementState {
    /// Names reserved; the owner is creating it.
    Reserved,
    /// The owner created it.
    Placed,
    /// Its owner was marked lost; it holds nothing any more.
    Lost,
}

/// A sandbox as the cluster knows it: who owns it and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The node that runs it.
    pub owner: NodeId,
    /// Its name ("" when unnamed).
    pub name: String,
    /// Custom hostnames bound to it.
    pub hostnames: Vec<String>,
    /// Where it stands.
    pub state: PlacementState,
    /// When it was reserved (proposer time, Unix ms).
    pub reserved_at_ms: i64,
    /// The owner's epoch when it was reserved.
    pub epoch: u64,
    /// The [`token_digest`] of its envd access token ("" when not given).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token_digest: String,
    /// What it was created as.
    #[serde(default)]
    pub summary: SandboxSummary,
}

/// What the log keeps of a sandbox beyond its placement: what it was created as, so any node can
/// show it as `lost` once its owner is gone (the owner's store, which knows the rest, is gone too).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSummary {
    /// Its template (for an image, the image's reference).
    pub template: String,
    /// The manifest digest of its image, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// CPU in thousandths.
    pub cpu_millis: u32,
    /// Memory limit in MiB.
    pub memory_mb: u32,
    /// Disk limit in MiB.
    pub disk_mb: u32,
    /// Its labels.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// What the log keeps of an envd access token: its SHA-256, hex. The token itself never enters the log.
pub fn token_digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl Placement {
    /// Whether it still holds its name, hostnames and fingerprint.
    pub fn is_live(&self) -> bool {
        self.state != PlacementState::Lost
    }
}

/// The node every E2B create with one fingerprint is sent to, until when.
///
/// The node's own store dedupes the creates it is sent (its `request_idempotency` claim, as on a
/// single node); the log only makes every duplicate, whichever node it arrives at, go to that node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FingerprintHold {
    /// The node the first create was routed to.
    pub owner: NodeId,
    /// Until when duplicates are routed there (proposer time, Unix ms).
    pub until_ms: i64,
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Command {
    /// A node renews its lease and reports its capacity (also how a node first appears).
    #[serde(rename_all = "camelCase")]
    Lease {
        node: NodeId,
        member: Member,
        capacity: Capacity,
        at_ms: i64,
        until_ms: i64,
    },
    /// The leader's watchdog: `node`'s lease lapsed more than `grace_ms` before `at_ms`.
    #[serde(rename_all = "camelCase")]
    MarkLost {
        node: NodeId,
        at_ms: i64,
        grace_ms: i64,
    },
    /// `node` destroyed what it ran for placements lost in `epoch`; the mark goes.
    Recovered { node: NodeId, epoch: u64 },
    /// Reserve sandbox `id` on `owner`, with its name and the [`token_digest`] of its envd access
    /// token (how an envd call that names nothing but its token is routed).
    #[serde(rename_all = "camelCase")]
    Reserve {
        id: String,
        owner: NodeId,
        name: String,
        #[serde(default)]
        token_digest: String,
        #[serde(default)]
        summary: SandboxSummary,
        at_ms: i64,
    },
    /// Route E2B creates with `fingerprint` to `owner` for `replay_ms`, unless a live node holds it.
    #[serde(rename_all = "camelCase")]
    RouteFingerprint {
        fingerprint: String,
        owner: NodeId,
        replay_ms: i64,
        at_ms: i64,
    },
    /// The owner created `id`.
    Commit { id: String },
    /// `id` is gone (deleted, or its create failed): everything it held is free.
    Release { id: String },
    /// Bind a custom hostname to `id`.
    BindHostname { hostname: String, id: String },
    /// Unbind a custom hostname from `id`.
    UnbindHostname { hostname: String, id: String },
    /// Add API key `id`, accepted by every node.
    PutKey { id: String, key: KeyRecord },
    /// Revoke API key `id` on every node.
    RevokeKey { id: String },
    /// Template `name` is ready on `node` (`present`), or is no longer there.
    TemplateHome {
        name: String,
        node: NodeId,
        present: bool,
    },
    /// Volume `name` (id `id`) lives on `node` (`present`: its name is taken cluster-wide), or is
    /// gone.
    VolumeHome {
        name: String,
        id: String,
        node: NodeId,
        present: bool,
    },
}

/// Where a volume lives: the one node whose disk holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeHome {
    pub id: String,
    pub node: NodeId,
}

/// An API key every node accepts (cluster mode keeps minted keys in the log): its public facts and
/// the SHA-256 of its secret, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRecord {
    /// Its name.
    pub name: String,
    /// `admin` or `user`.
    pub scope: String,
    /// `hex(sha256(secret))`.
    pub digest: String,
    /// The first characters of the secret, to tell keys apart.
    pub prefix: String,
    /// When it was made (proposer time, Unix ms).
    pub created_at_ms: i64,
}

/// What applying an entry decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum Outcome {
    /// Done as asked.
    Applied,
    /// Nothing to do (already so, or no longer applies).
    Unchanged,
    /// The name is held by another live sandbox.
    NameTaken { holder: String },
    /// The hostname is bound to another live sandbox.
    HostnameTaken { holder: String },
    /// Creates with this fingerprint go to `owner` (the proposed node, or the one that held it).
    Routed { owner: NodeId },
    /// The sandbox is not placed (or no longer live).
    UnknownSandbox,
    /// The owner is marked lost (or unknown): nothing is placed on it.
    OwnerUnavailable,
}

/// The whole replicated state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    /// Nodes that ever took a lease.
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    /// Sandbox id → placement.
    pub placements: BTreeMap<String, Placement>,
    /// Name → the live sandbox holding it.
    pub names: BTreeMap<String, String>,
    /// Custom hostname → the live sandbox it is bound to.
    pub hostnames: BTreeMap<String, String>,
    /// E2B create fingerprint → the node its creates go to.
    pub fingerprints: BTreeMap<String, FingerprintHold>,
    /// Template name → the nodes it is ready on: where sandboxes of it can be placed (a template's
    /// layers live in its node's own image store).
    #[serde(default)]
    pub templates: BTreeMap<String, BTreeSet<NodeId>>,
    /// API key id → the key, for keys made in cluster mode.
    #[serde(default)]
    pub keys: BTreeMap<String, KeyRecord>,
    /// Volume name → where it lives: names are unique cluster-wide, and a create that mounts a
    /// volume is placed on its node.
    #[serde(default)]
    pub volumes: BTreeMap<String, VolumeHome>,
}

impl ClusterState {
    /// Applies one entry. Deterministic: see the module doc.
    pub fn apply(&mut self, command: &Command) -> Outcome {
        match command {
            Command::Lease {
                node,
                member,
                capacity,
                at_ms: _,
                until_ms,
            } => {
                let record = self.nodes.entry(*node).or_default();
                record.member = member.clone();
                record.capacity = *capacity;
                record.lease_until_ms = record.lease_until_ms.max(*until_ms);
                Outcome::Applied
            }
            Command::MarkLost {
                node,
                at_ms,
                grace_ms,
            } => self.mark_lost(*node, *at_ms, *grace_ms),
            Command::Recovered { node, epoch } => match self.nodes.get_mut(node) {
                Some(record) if record.lost && record.epoch == *epoch => {
                    record.lost = false;
                    // What it held is released already; the lost records go too.
                    self.placements
                        .retain(|_, p| !(p.owner == *node && p.state == PlacementState::Lost));
                    Outcome::Applied
                }
                _ => Outcome::Unchanged,
            },
            Command::Reserve {
                id,
                owner,
                name,
                token_digest,
                summary,
                at_ms,
            } => self.reserve(id, *owner, name, token_digest, summary, *at_ms),
            Command::RouteFingerprint {
                fingerprint,
                owner,
                replay_ms,
                at_ms,
            } => self.route_fingerprint(fingerprint, *owner, *replay_ms, *at_ms),
            Command::Commit { id } => match self.placements.get_mut(id) {
                Some(p) if p.state == PlacementState::Reserved => {
                    p.state = PlacementState::Placed;
                    Outcome::Applied
                }
                Some(p) if p.state == PlacementState::Placed => Outcome::Unchanged,
                _ => Outcome::UnknownSandbox,
            },
            Command::Release { id } => match self.placements.remove(id) {
                Some(p) => {
                    self.let_go(id, &p);
                    Outcome::Applied
                }
                None => Outcome::Unchanged,
            },
            Command::PutKey { id, key } => {
                if self.keys.contains_key(id) {
                    return Outcome::Unchanged;
                }
                self.keys.insert(id.clone(), key.clone());
                Outcome::Applied
            }
            Command::RevokeKey { id } => match self.keys.remove(id) {
                Some(_) => Outcome::Applied,
                None => Outcome::Unchanged,
            },
            Command::TemplateHome {
                name,
                node,
                present,
            } => {
                let changed = if *present {
                    self.templates
                        .entry(name.clone())
                        .or_default()
                        .insert(*node)
                } else {
                    let homes = self.templates.get_mut(name);
                    let removed = homes.is_some_and(|h| h.remove(node));
                    self.templates.retain(|_, homes| !homes.is_empty());
                    removed
                };
                if changed {
                    Outcome::Applied
                } else {
                    Outcome::Unchanged
                }
            }
            Command::VolumeHome {
                name,
                id,
                node,
                present: true,
            } => match self.volumes.get(name) {
                Some(home) if home.id == *id => Outcome::Unchanged,
                Some(home) => Outcome::NameTaken {
                    holder: home.id.clone(),
                },
                None => {
                    let home = VolumeHome {
                        id: id.clone(),
                        node: *node,
                    };
                    self.volumes.insert(name.clone(), home);
                    Outcome::Applied
                }
            },
            Command::VolumeHome {
                name,
                id,
                present: false,
                ..
            } => match self.volumes.get(name) {
                Some(home) if home.id == *id => {
                    self.volumes.remove(name);
                    Outcome::Applied
                }
                _ => Outcome::Unchanged,
            },
            Command::BindHostname { hostname, id } => {
                match self.placements.get(id) {
                    Some(p) if p.is_live() => {}
                    _ => return Outcome::UnknownSandbox,
                }
                match self.hostnames.get(hostname) {
                    Some(holder) if holder == id => return Outcome::Unchanged,
                    Some(holder) => {
                        return Outcome::HostnameTaken {
                            holder: holder.clone(),
                        }
                    }
                    None => {}
                }
                self.hostnames.insert(hostname.clone(), id.clone());
                if let Some(p) = self.placements.get_mut(id) {
                    p.hostnames.push(hostname.clone());
                }
                Outcome::Applied
            }
            Command::UnbindHostname { hostname, id } => {
                if self.hostnames.get(hostname) != Some(id) {
                    return Outcome::Unchanged;
                }
                self.hostnames.remove(hostname);
                if let Some(p) = self.placements.get_mut(id) {
                    p.hostnames.retain(|h| h != hostname);
                }
                Outcome::Applied
            }
        }
    }

    fn route_fingerprint(
        &mut self,
        fingerprint: &str,
        owner: NodeId,
        replay_ms: i64,
        at_ms: i64,
    ) -> Outcome {
        self.fingerprints.retain(|_, hold| hold.until_ms > at_ms);
        if let Some(hold) = self.fingerprints.get(fingerprint) {
            return Outcome::Routed { owner: hold.owner };
        }
        match self.nodes.get(&owner) {
            Some(record) if !record.lost => {}
            _ => return Outcome::OwnerUnavailable,
        }
        self.fingerprints.insert(
            fingerprint.to_string(),
            FingerprintHold {
                owner,
                until_ms: at_ms.saturating_add(replay_ms),
            },
        );
        Outcome::Routed { owner }
    }

    fn reserve(
        &mut self,
        id: &str,
        owner: NodeId,
        name: &str,
        token_digest: &str,
        summary: &SandboxSummary,
        at_ms: i64,
    ) -> Outcome {
        if let Some(existing) = self.placements.get(id) {
            // A retry of this very reservation answers as the first did.
            return if existing.owner == owner && existing.name == name && existing.is_live() {
                Outcome::Unchanged
            } else {
                Outcome::NameTaken {
                    holder: id.to_string(),
                }
            };
        }
        let epoch = match self.nodes.get(&owner) {
            Some(record) if !record.lost => record.epoch,
            _ => return Outcome::OwnerUnavailable,
        };
        if !name.is_empty() {
            if let Some(holder) = self.names.get(name) {
                return Outcome::NameTaken {
                    holder: holder.clone(),
                };
            }
            self.names.insert(name.to_string(), id.to_string());
        }
        self.placements.insert(
            id.to_string(),
            Placement {
                owner,
                name: name.to_string(),
                hostnames: Vec::new(),
                state: PlacementState::Reserved,
                reserved_at_ms: at_ms,
                epoch,
                token_digest: token_digest.to_string(),
                summary: summary.clone(),
            },
        );
        Outcome::Applied
    }

    fn mark_lost(&mut self, node: NodeId, at_ms: i64, grace_ms: i64) -> Outcome {
        let Some(record) = self.nodes.get_mut(&node) else {
            return Outcome::Unchanged;
        };
        if record.lost || record.lease_until_ms.saturating_add(grace_ms) > at_ms {
            return Outcome::Unchanged;
        }
        record.lost = true;
        record.epoch += 1;
        // Duplicates of its creates go wherever the next one is placed.
        self.fingerprints.retain(|_, hold| hold.owner != node);
        let owned: Vec<String> = self
            .placements
            .iter()
            .filter(|(_, p)| p.owner == node && p.is_live())
            .map(|(id, _)| id.clone())
            .collect();
        for id in owned {
            let p = self.placements.get(&id).cloned().expect("listed above");
            self.let_go(&id, &p);
            if let Some(p) = self.placements.get_mut(&id) {
                p.state = PlacementState::Lost;
                p.hostnames.clear();
            }
        }
        Outcome::Applied
    }

    /// Frees what placement `p` of `id` holds.
    fn let_go(&mut self, id: &str, p: &Placement) {
        if self.names.get(&p.name).is_some_and(|holder| holder == id) {
            self.names.remove(&p.name);
        }
        for hostname in &p.hostnames {
            if self
                .hostnames
                .get(hostname)
                .is_some_and(|holder| holder == id)
            {
                self.hostnames.remove(hostname);
            }
        }
    }

    /// The live sandbox holding `name`, if any.
    pub fn holder_of_name(&self, name: &str) -> Option<&str> {
        self.names.get(name).map(String::as_str)
    }

    /// The API key whose secret has `digest`, if one is in force.
    pub fn key_by_digest(&self, digest: &str) -> Option<(&str, &KeyRecord)> {
        self.keys
            .iter()
            .find(|(_, k)| k.digest == digest)
            .map(|(id, k)| (id.as_str(), k))
    }

    /// The live sandbox whose envd access token has `digest` ([`token_digest`]), if any.
    pub fn holder_of_token(&self, digest: &str) -> Option<&str> {
        if digest.is_empty() {
            return None;
        }
        self.placements
            .iter()
            .find(|(_, p)| p.is_live() && p.token_digest == digest)
            .map(|(id, _)| id.as_str())
    }

    /// The sandbox `key` names among those lost with their node: by id, else the newest that had
    /// `key` as its name (a lost sandbox's name is free again, so several may have had it).
    pub fn lost_sandbox(&self, key: &str) -> Option<(&str, &Placement)> {
        let lost = |p: &Placement| p.state == PlacementState::Lost;
        if let Some((id, p)) = self.placements.get_key_value(key) {
            return lost(p).then_some((id.as_str(), p));
        }
        self.placements
            .iter()
            .filter(|(_, p)| lost(p) && !p.name.is_empty() && p.name == key)
            .max_by_key(|(_, p)| p.reserved_at_ms)
            .map(|(id, p)| (id.as_str(), p))
    }

    /// The owner of `id`, while its placement is live.
    pub fn owner_of(&self, id: &str) -> Option<NodeId> {
        self.placements
            .get(id)
            .filter(|p| p.is_live())
            .map(|p| p.owner)
    }

    /// Every index agrees with the placements: each name and hostname points at a live placement that
    /// records it, no live placement's name is missing from the index, and every fingerprint routes to
    /// a node that is not lost. The unit tests run it after every entry.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (name, id) in &self.names {
            match self.placements.get(id) {
                Some(p) if p.is_live() && &p.name == name => {}
                _ => {
                    return Err(format!(
                        "name {name:?} points at {id}, which does not hold it"
                    ))
                }
            }
        }
        for (hostname, id) in &self.hostnames {
            match self.placements.get(id) {
                Some(p) if p.is_live() && p.hostnames.contains(hostname) => {}
                _ => {
                    return Err(format!(
                        "hostname {hostname:?} points at {id}, which does not hold it"
                    ))
                }
            }
        }
        for (f, hold) in &self.fingerprints {
            if self.nodes.get(&hold.owner).is_none_or(|r| r.lost) {
                return Err(format!(
                    "fingerprint {f:?} routes to node {}, which is lost or unknown",
                    hold.owner
                ));
            }
        }
        for (id, p) in self.placements.iter().filter(|(_, p)| p.is_live()) {
            if !p.name.is_empty() && self.names.get(&p.name) != Some(id) {
                return Err(format!(
                    "{id} is live with name {:?}, which the index does not give it",
                    p.name
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

impl ClusterState {
    /// The node volume `key` (its name or id) lives on, if the log knows it.
    pub fn volume_node(&self, key: &str) -> Option<NodeId> {
        self.volumes
            .get(key)
            .or_else(|| self.volumes.values().find(|home| home.id == key))
            .map(|home| home.node)
    }
}
