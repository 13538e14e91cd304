//! Where a compiled graph's runs spend their time: per node of the compiled graph, its calls
//! and their total, as the backend measured them while profiling was on.

use rlx_ir::NodeId;
use std::fmt;
use std::time::Duration;

/// One node's timings since profiling was turned on.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTime {
    pub node: NodeId,
    /// The op kind as the backend ran it (a fused kind where fusion folded a chain).
    pub op: String,
    /// The dims of its first output.
    pub dims: Vec<usize>,
    pub calls: u64,
    pub total: Duration,
}

/// The timings of every node that ran while profiling was on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub nodes: Vec<NodeTime>,
}

impl Profile {
    /// Time spent in all nodes together.
    pub fn total(&self) -> Duration {
        self.nodes.iter().map(|n| n.total).sum()
    }

    /// Per op kind: node calls and their total time, the slowest kind first.
    pub fn by_op(&self) -> Vec<(String, u64, Duration)> {
        let mut kinds: Vec<(String, u64, Duration)> = Vec::new();
        for n in &self.nodes {
            match kinds.iter_mut().find(|k| k.0 == n.op) {
                Some(k) => {
                    k.1 += n.calls;
                    k.2 += n.total;
                }
                None => kinds.push((n.op.clone(), n.calls, n.total)),
            }
        }
        kinds.sort_by_key(|k| std::cmp::Reverse(k.2));
        kinds
    }
}

/// Lines each listing at most this many nodes, the slowest first.
const SLOWEST: usize = 20;

/// A table per op kind, then the slowest nodes; times are per run where every node ran as
/// many times as the most-called one, totals otherwise.
impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs = self.nodes.iter().map(|n| n.calls).max().unwrap_or(0).max(1);
        let total = self.total().as_secs_f64().max(f64::MIN_POSITIVE);
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / runs as f64;
        writeln!(f, "profile over {runs} run(s): {:.3} ms a run in nodes", ms(self.total()))?;
        writeln!(f, "{:<28} {:>6} {:>10} {:>7}", "op", "nodes", "ms/run", "share")?;
        for (op, calls, time) in self.by_op() {
            let share = 100.0 * time.as_secs_f64() / total;
            writeln!(f, "{op:<28} {:>6} {:>10.3} {share:>6.1}%", calls.div_ceil(runs), ms(time))?;
        }
        let mut slowest: Vec<&NodeTime> = self.nodes.iter().collect();
        slowest.sort_by_key(|n| std::cmp::Reverse(n.total));
        writeln!(f, "slowest nodes:")?;
        for n in slowest.into_iter().take(SLOWEST) {
            let share = 100.0 * n.total.as_secs_f64() / total;
            writeln!(f, "  %{:<6} {:<26} {:<22} {:>10.3} {share:>6.1}%", n.node.0, n.op, format!("{:?}", n.dims), ms(n.total))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u32, op: &str, calls: u64, micros: u64) -> NodeTime {
        NodeTime { node: NodeId(id), op: op.into(), dims: vec![2, 3], calls, total: Duration::from_micros(micros) }
    }

    #[test]
    fn kinds_sum_their_nodes_slowest_first() {
        let p = Profile { nodes: vec![node(1, "Conv", 4, 300), node(2, "Binary", 4, 500), node(3, "Conv", 4, 400)] };
        assert_eq!(p.total(), Duration::from_micros(1200));
        assert_eq!(p.by_op(), vec![("Conv".into(), 8, Duration::from_micros(700)), ("Binary".into(), 4, Duration::from_micros(500))]);
        let text = p.to_string();
        assert!(text.starts_with("profile over 4 run(s): 0.300 ms a run"), "{text}");
        assert!(text.contains("%2      Binary"), "{text}");
    }
}
