//! A DNS server test double for sandboxes whose lists name domains: it runs inside an outside
//! namespace ([`super::outside::Outside`]) on UDP and TCP port 53 and answers from a fixed table.
//! An A query for a name in the table gets its address (a `*.` entry answers every name below it);
//! any other type for such a name an empty answer; an unknown name NXDOMAIN. It counts what it
//! answered, and stops when dropped.

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The running double.
pub struct DnsDouble {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

struct Table {
    records: Vec<(String, Ipv4Addr)>,
    ttl: u32,
}

impl DnsDouble {
    /// Serves `records` with TTL `ttl` at `address:53` inside the network namespace `netns`;
    /// returns once it listens.
    pub fn start(netns: &str, address: Ipv4Addr, records: &[(&str, Ipv4Addr)], ttl: u32) -> Self {
        let table = Arc::new(Table {
            records: records.iter().map(|(n, a)| (n.to_string(), *a)).collect(),
            ttl,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let mut threads = Vec::new();
        for tcp in [false, true] {
            let (table, stop, answered) = (table.clone(), stop.clone(), answered.clone());
            let ns = std::fs::File::open(format!("/run/netns/{netns}")).unwrap();
            let (ready, listening) = std::sync::mpsc::channel();
            threads.push(std::thread::spawn(move || {
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                if tcp {
                    let listener = TcpListener::bind((address, 53)).unwrap();
                    listener.set_nonblocking(true).unwrap();
                    ready.send(()).unwrap();
                    serve_tcp(&listener, &table, &stop, &answered);
                } else {
                    let socket = UdpSocket::bind((address, 53)).unwrap();
                    socket
                        .set_read_timeout(Some(Duration::from_millis(50)))
                        .unwrap();
                    ready.send(()).unwrap();
                    serve_udp(&socket, &table, &stop, &answered);
                }
            }));
            listening
                .recv_timeout(Duration::from_secs(10))
                .expect("the DNS double did not start");
        }
        DnsDouble {
            stop,
            answered,
            threads,
        }
    }

    /// How many queries it answered.
    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }
}

impl Drop for DnsDouble {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn serve_udp(socket: &UdpSocket, table: &Table, stop: &AtomicBool, answered: &AtomicUsize) {
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        let Ok((n, peer)) = socket.recv_from(&mut buf) else {
            continue;
        };
        if let Some(reply) = table.reply(&buf[..n]) {
            answered.fetch_add(1, Ordering::SeqCst);
            let _ = socket.send_to(&reply, peer);
        }
    }
}

fn serve_tcp(listener: &TcpListener, table: &Table, stop: &AtomicBool, answered: &AtomicUsize) {
    while !stop.load(Ordering::SeqCst) {
        // Waits for a connection, looking at `stop` at least every 100 ms.
        let Some((mut stream, _)) = super::accept_within(listener, Duration::from_millis(100))
        else {
            continue;
        };
        let _ = stream.set_nonblocking(false);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let mut len = [0u8; 2];
        while stream.read_exact(&mut len).is_ok() {
            let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if stream.read_exact(&mut query).is_err() {
                break;
            }
            let Some(reply) = table.reply(&query) else {
                break;
            };
            answered.fetch_add(1, Ordering::SeqCst);
            let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
            framed.extend_from_slice(&reply);
            if stream.write_all(&framed).is_err() {
                break;
            }
        }
    }
}

impl Table {
    fn lookup(&self, name: &str) -> Option<Ipv4Addr> {
        self.records.iter().find_map(|(entry, address)| {
            let hit = match entry.strip_prefix("*.") {
                Some(suffix) => name.ends_with(&format!(".{suffix}")),
                None => name == entry,
            };
            hit.then_some(*address)
        })
    }

    fn reply(&self, query: &[u8]) -> Option<Vec<u8>> {
        let asked = Message::from_vec(query).ok()?;
        let question = asked.queries.first()?.clone();
        let mut reply = Message::response(asked.metadata.id, asked.metadata.op_code);
        reply.metadata.recursion_desired = asked.metadata.recursion_desired;
        reply.metadata.recursion_available = true;
        reply.add_queries(asked.queries.iter().cloned());
        let name = question.name.to_ascii().to_ascii_lowercase();
        match self.lookup(name.trim_end_matches('.')) {
            None => reply.metadata.response_code = ResponseCode::NXDomain,
            Some(address) if question.query_type == RecordType::A => {
                reply.add_answer(Record::from_rdata(
                    question.name.clone(),
                    self.ttl,
                    RData::A(A(address)),
                ));
            }
            Some(_) => {}
        }
        reply.to_vec().ok()
    }
}
