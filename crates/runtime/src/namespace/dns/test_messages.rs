//! DNS messages for the unit tests of this module's parts.

use super::NamePattern;
use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use std::net::Ipv4Addr;

pub fn name(text: &str) -> Name {
    Name::from_ascii(text).unwrap()
}

/// A query `id` for the A records of `asked`.
pub fn query(id: u16, asked: &str) -> Message {
    let mut m = Message::new(id, MessageType::Query, OpCode::Query);
    m.add_query(Query::query(name(asked), RecordType::A));
    m
}

/// The answer to a query for `asked` carrying `records`.
pub fn answer(asked: &str, records: Vec<Record>) -> Message {
    let mut m = query(7, asked);
    m.metadata.message_type = MessageType::Response;
    m.add_answers(records);
    m
}

pub fn a(owner: &str, ttl: u32, address: [u8; 4]) -> Record {
    Record::from_rdata(name(owner), ttl, RData::A(A(Ipv4Addr::from(address))))
}

pub fn patterns(list: &[&str]) -> Vec<NamePattern> {
    list.iter().map(|p| p.parse().unwrap()).collect()
}

/// The default sandbox subnet, 10.201.0.0/16.
pub const SUBNET: std::ops::Range<u32> = 0x0ac9_0000..0x0aca_0000;
