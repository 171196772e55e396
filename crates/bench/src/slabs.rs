//! The kernel's slab caches, from `/proc/slabinfo` (root only): which caches a run's sandboxes
//! grew, so `bench density` can say where the kernel's share of an idle sandbox goes.

use anyhow::Context;
use std::collections::HashMap;

/// Bytes held by each slab cache: its objects times their size.
#[derive(Debug, Clone, Default)]
pub struct Slabs(HashMap<String, u64>);

impl Slabs {
    /// The caches as the kernel reports them now.
    pub fn read() -> anyhow::Result<Slabs> {
        let text = std::fs::read_to_string("/proc/slabinfo").context("reading /proc/slabinfo")?;
        Ok(Slabs::parse(&text))
    }

    /// `slabinfo` text (two header lines, then `name active_objs num_objs objsize …`); a line
    /// that does not parse is skipped.
    fn parse(text: &str) -> Slabs {
        let caches = text
            .lines()
            .filter(|l| !l.starts_with("slabinfo") && !l.starts_with('#'))
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let name = fields.next()?;
                let _active: u64 = fields.next()?.parse().ok()?;
                let objects: u64 = fields.next()?.parse().ok()?;
                let size: u64 = fields.next()?.parse().ok()?;
                Some((name.to_string(), objects * size))
            })
            .collect();
        Slabs(caches)
    }

    /// The `n` caches that grew most since `before`, largest first, in KiB per one of `count`.
    pub fn grown_since(&self, before: &Slabs, count: usize, n: usize) -> Vec<(String, f64)> {
        let mut grown: Vec<(String, f64)> = self
            .0
            .iter()
            .map(|(name, now)| {
                let then = before.0.get(name).copied().unwrap_or(0);
                let kib = (*now as f64 - then as f64) / 1024.0 / count.max(1) as f64;
                (name.clone(), kib)
            })
            .filter(|(_, kib)| *kib > 0.0)
            .collect();
        grown.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        grown.truncate(n);
        grown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "slabinfo - version: 2.1\n# name <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab> : tunables <limit> <batchcount> <sharedfactor> : slabdata <active_slabs> <num_slabs> <sharedavail>\n";

    #[test]
    fn caches_that_grew_most_come_first_per_sandbox() {
        let before = Slabs::parse(&format!(
            "{HEADER}kmalloc-1k 10 16 1024 16 4 : tunables 0 0 0 : slabdata 1 1 0\n\
             dentry 100 126 192 21 1 : tunables 0 0 0 : slabdata 6 6 0\n"
        ));
        let after = Slabs::parse(&format!(
            "{HEADER}kmalloc-1k 200 216 1024 16 4 : tunables 0 0 0 : slabdata 14 14 0\n\
             dentry 100 147 192 21 1 : tunables 0 0 0 : slabdata 7 7 0\n\
             net_namespace 2 2 4096 1 1 : tunables 0 0 0 : slabdata 2 2 0\n\
             broken line\n"
        ));
        let grown = after.grown_since(&before, 2, 2);
        assert_eq!(
            grown,
            [
                ("kmalloc-1k".to_string(), 100.0),
                ("net_namespace".to_string(), 4.0)
            ]
        );
        assert_eq!(after.grown_since(&before, 2, 9).len(), 3, "dentry grew too");
    }
}
