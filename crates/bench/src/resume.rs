//! API pause and resume→first exec of one namespace sandbox: `n` rounds, each pausing it with its
//! memory (frozen in place), then resuming it and running `true` at once, every call timed with the
//! steps the daemon names (a resume's include ending the terminals the pause cut off, a round trip
//! to the agent before the sandbox is recorded running).
//!
//! Guarantees: the sandbox is the fleet's ([`ApiFleet`]), deleted here on success and by the
//! fleet's teardown on error or Ctrl-C.

use crate::http::ApiFleet;
use crate::report::Latency;
use crate::steps::{StepBreakdown, StepSamples};
use anyhow::Context;
use sandboxd_client::types::PauseMode;
use serde::Serialize;
use std::time::Instant;

/// Figures of [`measure`].
#[derive(Debug, Clone, Serialize)]
pub struct ResumeFigure {
    /// `POST …/pause {mode: memory}` of a running sandbox.
    pub pause: Latency,
    /// `POST …/resume`, then `true` run in it.
    pub resume_to_first_exec: Latency,
    /// Where its time went: the resume's steps, then the exec's.
    pub breakdown: Vec<StepBreakdown>,
}

impl ResumeFigure {
    /// Lines for people.
    pub fn print(&self) {
        println!("{}", self.pause.line("API pause"));
        crate::http::print_with_breakdown(
            &self.resume_to_first_exec,
            "API resume→first-exec",
            &self.breakdown,
        );
    }
}

/// `n` pauses and resumes→first exec of one sandbox, after one untimed round.
pub(crate) async fn measure(fleet: &ApiFleet, n: usize) -> anyhow::Result<ResumeFigure> {
    let id = fleet.create().await?.id;
    let mut pauses = Vec::with_capacity(n);
    let mut resumes = Vec::with_capacity(n);
    let mut samples = [StepSamples::new("resume"), StepSamples::new("first exec")];
    for round in 0..=n {
        let t = Instant::now();
        let paused = fleet
            .client
            .pause(&id, PauseMode::Memory)
            .await
            .with_context(|| format!("pausing {id}"))?;
        let paused_in = t.elapsed();
        anyhow::ensure!(
            paused.state == "paused",
            "{id} answered its pause {:?}",
            paused.state
        );
        let t = Instant::now();
        let resumed = fleet
            .client
            .resume_timed(&id)
            .await
            .with_context(|| format!("resuming {id}"))?;
        let resumed_in = t.elapsed();
        let ran = fleet.run_true(&id).await?;
        let took = t.elapsed();
        if round == 0 {
            continue;
        }
        pauses.push(paused_in);
        resumes.push(took);
        samples[0].add(resumed_in, &resumed.steps);
        samples[1].add(took - resumed_in, &ran.steps);
    }
    fleet.delete(&id).await?;
    Ok(ResumeFigure {
        pause: Latency::new("API pause", &pauses, None)?,
        resume_to_first_exec: Latency::new("API resume→first-exec", &resumes, None)?,
        breakdown: samples.iter().filter_map(StepSamples::summary).collect(),
    })
}
