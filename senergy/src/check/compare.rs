//! `senergy check --compare [SECONDS]`: over a window, the node's power as slurmd's ledger
//! accounts it (the plugin's figure) beside what an independent reader of the same
//! hardware says ([`super::readers`]), with a verdict against a tolerance that suits the
//! pair, and where the node has both RAPL and a whole-node meter, the share of the node's
//! wall power that RAPL sees.
//!
//! [`measure`](mod@measure) takes both sides over the window, [`verdict`] sets them against each other,
//! [`output`] says the comparison.

mod measure;
mod output;
mod verdict;

pub use measure::measure;
pub use output::{json, text};
pub use verdict::Comparison;
