//! `bench http`'s volume figure: the volume file API's write and read throughput against writing
//! and reading the same bytes through a sandbox (`/v1/sandboxes/{id}/files`, the sandbox's agent).
//!
//! One volume (named after the run) and one sandbox of the run's fleet; [`BYTES`] written and read
//! back [`ROUNDS`] times each way, alternating, after one untimed round; MB/s from the p50 round.
//! The volume is deleted whatever happens (the sandbox goes with the fleet).

use crate::http::ApiFleet;
use anyhow::Context;
use bytes::Bytes;
use sandboxd_client::types::CreateVolume;
use serde::Serialize;
use std::time::{Duration, Instant};

/// Bytes per transfer.
const BYTES: usize = 64 << 20;
/// Timed transfers each way.
const ROUNDS: usize = 5;
/// Bytes per chunk of an upload.
const CHUNK: usize = 1 << 20;

/// Throughput of one path, MB/s at the p50 round.
#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub write_mb_s: f64,
    pub read_mb_s: f64,
}

/// The volume file API against the sandbox's file API.
#[derive(Debug, Clone, Serialize)]
pub struct VolumeFilesFigure {
    pub bytes: usize,
    pub volume_api: Throughput,
    pub through_sandbox: Throughput,
}

impl VolumeFilesFigure {
    /// Lines for people.
    pub fn print(&self) {
        let v = &self.volume_api;
        let s = &self.through_sandbox;
        println!(
            "volume file API {} MiB: write {:.0} MB/s, read {:.0} MB/s; through a sandbox: write {:.0} MB/s, read {:.0} MB/s (volume/sandbox {:.2}, {:.2})",
            self.bytes >> 20,
            v.write_mb_s,
            v.read_mb_s,
            s.write_mb_s,
            s.read_mb_s,
            v.write_mb_s / s.write_mb_s,
            v.read_mb_s / s.read_mb_s
        );
    }
}

fn chunks() -> impl futures::Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    let chunk = Bytes::from(vec![0x5a; CHUNK]);
    futures::stream::iter((0..BYTES / CHUNK).map(move |_| Ok(chunk.clone())))
}

fn mb_s(samples: &mut [Duration]) -> f64 {
    samples.sort();
    let p50 = samples[samples.len() / 2].as_secs_f64();
    BYTES as f64 / 1e6 / p50.max(1e-9)
}

/// Measures both paths (see the module docs).
pub(crate) async fn measure(fleet: &ApiFleet) -> anyhow::Result<VolumeFilesFigure> {
    let client = &fleet.client;
    let name = format!("bench-{}", fleet.label().1);
    client
        .create_volume(&CreateVolume {
            name: name.clone(),
            ..Default::default()
        })
        .await
        .context("creating the bench volume")?;
    let outcome = rounds(fleet, &name).await;
    let deleted = client.delete_volume(&name).await;
    let figure = outcome?;
    deleted.context("deleting the bench volume")?;
    Ok(figure)
}

async fn rounds(fleet: &ApiFleet, volume: &str) -> anyhow::Result<VolumeFilesFigure> {
    let client = &fleet.client;
    let sandbox = fleet.create().await?;
    let mut times: [Vec<Duration>; 4] = Default::default();
    for round in 0..=ROUNDS {
        let t = Instant::now();
        client
            .upload_stream_to_volume(volume, "/bench.bin", chunks(), Some(BYTES as u64))
            .await?;
        let v_write = t.elapsed();
        let t = Instant::now();
        let got = client
            .download_from_volume(volume, "/bench.bin", &mut tokio::io::sink())
            .await?;
        let v_read = t.elapsed();
        anyhow::ensure!(got == BYTES as u64, "read {got} bytes back from the volume");
        let t = Instant::now();
        client
            .upload_stream(
                &sandbox.id,
                "/home/user/bench.bin",
                chunks(),
                Some(BYTES as u64),
            )
            .await?;
        let s_write = t.elapsed();
        let t = Instant::now();
        let got = client
            .download_to(&sandbox.id, "/home/user/bench.bin", &mut tokio::io::sink())
            .await?;
        let s_read = t.elapsed();
        anyhow::ensure!(
            got == BYTES as u64,
            "read {got} bytes back from the sandbox"
        );
        if round > 0 {
            for (v, d) in times.iter_mut().zip([v_write, v_read, s_write, s_read]) {
                v.push(d);
            }
        }
    }
    let [mut vw, mut vr, mut sw, mut sr] = times;
    Ok(VolumeFilesFigure {
        bytes: BYTES,
        volume_api: Throughput {
            write_mb_s: mb_s(&mut vw),
            read_mb_s: mb_s(&mut vr),
        },
        through_sandbox: Throughput {
            write_mb_s: mb_s(&mut sw),
            read_mb_s: mb_s(&mut sr),
        },
    })
}
