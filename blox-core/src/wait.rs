//! Why a job that is not running waits: set by the round loop at the end of
//! every round, from what each module decided, in simulation and on a
//! cluster alike.
//!
//! A job carries the compact, typed [`WaitReason`] (no strings: it is set
//! for every waiting job every round); [`crate::RoundLoop::explain_wait`]
//! renders it in words with the modules' names, the cluster's free GPUs and
//! what the policies say of the job.

use serde::{Deserialize, Serialize};

/// The reason a job is not running at the end of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum WaitReason {
    /// The admission policy has not admitted it.
    NotAdmitted,
    /// Not enough free GPUs for it in the scheduling policy's order (its
    /// place in that order: [`crate::RoundLoop::wait_position`]).
    WaitingForGpus {
        /// GPUs it asks for.
        asked: u32,
    },
    /// Enough GPUs were free in all, but the placement placed it nowhere.
    BlockedByPlacement { asked: u32 },
    /// The placement placed it and the loop held it back.
    Held { cause: HoldCause },
    /// It ran, and this round's decision preempted it.
    Preempted,
}

/// What held back a job the placement had placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HoldCause {
    /// GPUs it needs are held by jobs still starting or not yet past
    /// `min_run_s` (start-up-aware preemption).
    StartupProtection,
    /// The round's decision was invalid and dropped.
    DecisionDropped,
}

impl WaitReason {
    /// Every kind, as [`WaitReason::kind`] names them, in the order of
    /// [`WaitReason::index`].
    pub const KINDS: [&'static str; 5] = [
        "not-admitted",
        "waiting-for-gpus",
        "blocked-by-placement",
        "held",
        "preempted",
    ];

    /// A reason of kind `kind` (a word of [`WaitReason::KINDS`]) for a job
    /// asking for `asked` GPUs, with the details a log's `waiting` event
    /// does not carry set to their first value (a replay's jobs continue
    /// from the kinds a log shows).
    pub fn of_kind(kind: &str, asked: u32) -> Option<WaitReason> {
        Some(match kind {
            "not-admitted" => WaitReason::NotAdmitted,
            "waiting-for-gpus" => WaitReason::WaitingForGpus { asked },
            "blocked-by-placement" => WaitReason::BlockedByPlacement { asked },
            "held" => WaitReason::Held {
                cause: HoldCause::StartupProtection,
            },
            "preempted" => WaitReason::Preempted,
            _ => return None,
        })
    }

    /// The kind, a stable word (`waiting-for-gpus`, …).
    pub fn kind(&self) -> &'static str {
        Self::KINDS[self.index()]
    }

    /// The kind's position in [`WaitReason::KINDS`].
    pub fn index(&self) -> usize {
        match self {
            WaitReason::NotAdmitted => 0,
            WaitReason::WaitingForGpus { .. } => 1,
            WaitReason::BlockedByPlacement { .. } => 2,
            WaitReason::Held { .. } => 3,
            WaitReason::Preempted => 4,
        }
    }
}

/// `1st`, `2nd`, `3rd`, `4th`, … `11th`, `21st`.
pub fn ordinal(n: u32) -> String {
    format!("{n}{}", ordinal_suffix(n))
}

/// The suffix of [`ordinal`]: `st`, `nd`, `rd` or `th`.
pub fn ordinal_suffix(n: u32) -> &'static str {
    match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_stable_words_and_reasons_round_trip() {
        let r = WaitReason::WaitingForGpus { asked: 4 };
        assert_eq!(r.kind(), "waiting-for-gpus");
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"kind\":\"waiting-for-gpus\""), "{json}");
        assert_eq!(serde_json::from_str::<WaitReason>(&json).unwrap(), r);
        let h = WaitReason::Held {
            cause: HoldCause::StartupProtection,
        };
        assert_eq!(
            serde_json::from_str::<WaitReason>(&serde_json::to_string(&h).unwrap()).unwrap(),
            h
        );
        for (i, k) in WaitReason::KINDS.iter().enumerate() {
            assert!(!k.contains(' '));
            assert_eq!(WaitReason::KINDS.iter().position(|x| x == k), Some(i));
        }
        assert_eq!(
            [1, 2, 3, 4, 11, 12, 13, 21, 22, 101].map(ordinal),
            ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st"]
        );
    }
}

/// GPU time in the unit that fits its size, for the words of a wait reason:
/// `42 GPU-s`, `12.5 GPU-min`, `3.20 GPU-h` (a minute-scale job under LAS
/// read "0.00 GPU-h" before).
pub fn gpu_time(gpu_s: f64) -> String {
    let g = gpu_s.max(0.0);
    if g < 60.0 {
        format!("{g:.0} GPU-s")
    } else if g < 3600.0 {
        format!("{:.1} GPU-min", g / 60.0)
    } else {
        format!("{:.2} GPU-h", g / 3600.0)
    }
}

#[cfg(test)]
mod gpu_time_tests {
    #[test]
    fn gpu_time_picks_the_unit_that_fits() {
        assert_eq!(super::gpu_time(0.0), "0 GPU-s");
        assert_eq!(super::gpu_time(42.4), "42 GPU-s");
        assert_eq!(super::gpu_time(750.0), "12.5 GPU-min");
        assert_eq!(super::gpu_time(3.2 * 3600.0), "3.20 GPU-h");
    }
}
