//! What a DNS answer teaches a sandbox's name sets (the pure part of [`super::forwarder`]).
//!
//! Contract: for an answer with a single question matching an allowed (denied) pattern, every
//! admissible A record's address goes into the allow (deny) set once, for its longest TTL clamped to
//! [`MIN_TTL`]..=[`MAX_TTL`]; records of other types (CNAME, AAAA, …) teach nothing, and neither does
//! an answer to another name or to several questions. Admissible: not the host's loopback,
//! link-local, multicast or broadcast, not in `0.0.0.0/8`, not in the runtime's sandbox subnet.

use super::NamePattern;
use crate::namespace::egress::{Learnt, NameSet};
use hickory_proto::op::Message;
use hickory_proto::rr::RData;
use std::net::Ipv4Addr;

/// Shortest lifetime of a learnt address, in seconds: long enough for the connection a TTL-0
/// answer was asked for.
pub const MIN_TTL: u32 = 30;
/// Longest lifetime of a learnt address, in seconds (one day).
pub const MAX_TTL: u32 = 86_400;

/// Whether an answer may admit `address` (see [`super`]).
pub(super) fn admissible(address: Ipv4Addr, excluded: &std::ops::Range<u32>) -> bool {
    !(address.octets()[0] == 0
        || address.is_loopback()
        || address.is_link_local()
        || address.is_multicast()
        || address.is_broadcast()
        || excluded.contains(&u32::from(address)))
}

/// What `answer` teaches: for a single question matching an allowed (denied) pattern, every
/// admissible A record's address in the allow (deny) set, each once, for its longest TTL clamped to
/// [`MIN_TTL`]..=[`MAX_TTL`].
pub(super) fn learnt(
    answer: &Message,
    allow: &[NamePattern],
    deny: &[NamePattern],
    admissible: impl Fn(Ipv4Addr) -> bool,
) -> Vec<Learnt> {
    let [question] = answer.queries.as_slice() else {
        return Vec::new();
    };
    let labels: Vec<&[u8]> = question.name.iter().collect();
    let sets: Vec<NameSet> = [(allow, NameSet::Allow), (deny, NameSet::Deny)]
        .into_iter()
        .filter(|(patterns, _)| patterns.iter().any(|p| p.matches_labels(&labels)))
        .map(|(_, set)| set)
        .collect();
    let mut out: Vec<Learnt> = Vec::new();
    for record in &answer.answers {
        let RData::A(a) = &record.data else {
            continue;
        };
        if !admissible(a.0) {
            continue;
        }
        let seconds = record.ttl.clamp(MIN_TTL, MAX_TTL);
        for &set in &sets {
            match out.iter_mut().find(|l| l.set == set && l.address == a.0) {
                Some(l) => l.seconds = l.seconds.max(seconds),
                None => out.push(Learnt {
                    set,
                    address: a.0,
                    seconds,
                }),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::namespace::dns::test_messages::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::rdata::{AAAA, CNAME};
    use hickory_proto::rr::{Record, RecordType};
    use std::net::Ipv6Addr;

    #[test]
    fn an_allowed_answer_teaches_its_a_records_for_their_clamped_ttl() {
        let m = answer(
            "API.allowed.test.",
            vec![
                Record::from_rdata(
                    name("api.allowed.test."),
                    300,
                    RData::CNAME(CNAME(name("edge.cdn.example."))),
                ),
                a("edge.cdn.example.", 0, [198, 18, 0, 2]),
                a("edge.cdn.example.", 60, [198, 18, 0, 2]),
                a("edge.cdn.example.", 1_000_000, [198, 18, 0, 3]),
                Record::from_rdata(
                    name("edge.cdn.example."),
                    60,
                    RData::AAAA(AAAA(Ipv6Addr::LOCALHOST)),
                ),
            ],
        );
        let ok = |address| admissible(address, &SUBNET);
        let allow = patterns(&["*.allowed.test"]);
        let learn = |set, address: [u8; 4], seconds| Learnt {
            set,
            address: Ipv4Addr::from(address),
            seconds,
        };
        assert_eq!(
            learnt(&m, &allow, &[], ok),
            [
                learn(NameSet::Allow, [198, 18, 0, 2], 60),
                learn(NameSet::Allow, [198, 18, 0, 3], MAX_TTL),
            ]
        );
        // Matching both lists: both sets (the chain's order makes the allowed one win).
        let both = learnt(&m, &allow, &patterns(&["api.allowed.test"]), ok);
        assert_eq!(both.len(), 4);
        assert!(both.contains(&learn(NameSet::Deny, [198, 18, 0, 3], MAX_TTL)));
        // A lone TTL-0 record still lives long enough to be used.
        let zero = answer(
            "a.allowed.test.",
            vec![a("a.allowed.test.", 0, [1, 2, 3, 4])],
        );
        assert_eq!(
            learnt(&zero, &allow, &[], ok),
            [learn(NameSet::Allow, [1, 2, 3, 4], MIN_TTL)]
        );
    }

    #[test]
    fn other_names_and_odd_answers_teach_nothing() {
        let ok = |address| admissible(address, &SUBNET);
        let allow = patterns(&["*.allowed.test", "exact.test"]);
        for asked in [
            "allowed.test.",
            "other.test.",
            "x.exact.test.",
            "allowed.test.evil.",
        ] {
            let m = answer(asked, vec![a(asked, 60, [1, 2, 3, 4])]);
            assert!(learnt(&m, &allow, &[], ok).is_empty(), "{asked}");
        }
        let mut two = answer("exact.test.", vec![a("exact.test.", 60, [1, 2, 3, 4])]);
        two.add_query(Query::query(name("other.test."), RecordType::A));
        assert!(learnt(&two, &allow, &[], ok).is_empty());
    }

    /// Invariant: no answer admits the host's loopback, link-local, multicast, broadcast or
    /// unspecified addresses, nor one in the sandbox subnet (the pairs' host ends, other sandboxes).
    #[test]
    fn answers_never_admit_host_local_or_sandbox_addresses() {
        for bad in [
            [127, 0, 0, 1],
            [0, 0, 0, 0],
            [0, 1, 2, 3],
            [169, 254, 169, 254],
            [224, 0, 0, 1],
            [255, 255, 255, 255],
            [10, 201, 0, 1],
            [10, 201, 255, 254],
        ] {
            assert!(!admissible(Ipv4Addr::from(bad), &SUBNET), "{bad:?}");
        }
        for good in [[10, 202, 0, 1], [10, 200, 255, 255], [198, 18, 0, 2]] {
            assert!(admissible(Ipv4Addr::from(good), &SUBNET), "{good:?}");
        }
    }
}
