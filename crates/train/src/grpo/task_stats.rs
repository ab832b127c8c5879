//! Each training task's running pass rate, so that a step draws the tasks that still
//! teach something: a task every rollout passes, or none does, gives a group with no
//! spread and no gradient.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How much of a task's earlier counts a new group keeps: the policy changes, and a
/// task learnt or forgotten must move back out of or into the band.
const DECAY: f64 = 0.5;

/// Decayed rollout and pass counts per task (by folder name); saved with every
/// checkpoint so that a resumed run draws what the uninterrupted one would.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskStats {
    pub by_task: BTreeMap<String, (f64, f64)>,
}

impl TaskStats {
    /// Records one group of `tries` rollouts of `task`, `passes` of which resolved it.
    pub fn record(&mut self, task: &str, tries: usize, passes: usize) {
        if tries == 0 {
            return;
        }
        let e = self.by_task.entry(task.to_string()).or_insert((0.0, 0.0));
        *e = (e.0 * DECAY + tries as f64, e.1 * DECAY + passes as f64);
    }

    /// The running pass rate of `task`, once it has been tried.
    pub fn rate(&self, task: &str) -> Option<f64> {
        self.by_task.get(task).filter(|(t, _)| *t > 0.0).map(|(t, p)| p / t)
    }

    /// Indices of the tasks inside `band` (`[low, high]`, inclusive) or never tried;
    /// every task without a band.
    pub fn eligible(&self, names: &[String], band: Option<[f64; 2]>) -> Vec<usize> {
        (0..names.len())
            .filter(|&i| match (band, self.rate(&names[i])) {
                (None, _) | (_, None) => true,
                (Some([lo, hi]), Some(r)) => r >= lo - 1e-9 && r <= hi + 1e-9,
            })
            .collect()
    }

    /// Tasks tried so far, and how many of them are outside `band`.
    pub fn outside(&self, band: [f64; 2]) -> (usize, usize) {
        let tried = self.by_task.len();
        let out = self.by_task.keys().filter(|t| self.rate(t).is_some_and(|r| r < band[0] || r > band[1])).count();
        (tried, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_leave_the_band_when_solved_and_come_back_when_forgotten() {
        let names: Vec<String> = ["easy", "hard", "mid", "new"].iter().map(|s| s.to_string()).collect();
        let mut s = TaskStats::default();
        s.record("easy", 4, 4);
        s.record("hard", 4, 0);
        s.record("mid", 4, 2);
        let band = Some([0.1, 0.9]);
        assert_eq!(s.eligible(&names, band), [2, 3], "solved and hopeless tasks wait; untried ones are drawn");
        assert_eq!(s.eligible(&names, None), [0, 1, 2, 3]);
        assert_eq!(s.outside([0.1, 0.9]), (3, 2));
        // The policy forgets `easy`: after one bad group it is back in the band.
        s.record("easy", 4, 1);
        assert!((s.rate("easy").unwrap() - 3.0 / 6.0).abs() < 1e-12);
        assert!(s.eligible(&names, band).contains(&0));
        s.record("none", 0, 0);
        assert_eq!(s.rate("none"), None);
    }
}
