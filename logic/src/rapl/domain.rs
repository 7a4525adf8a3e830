//! RAPL energy domains.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Domain {
    Package,
    Dram,
    /// The whole platform (Intel client parts). It includes the package and DRAM energy.
    Psys,
}

impl Domain {
    pub const ALL: [Domain; 3] = [Domain::Package, Domain::Dram, Domain::Psys];

    pub fn as_str(self) -> &'static str {
        match self {
            Domain::Package => "package",
            Domain::Dram => "dram",
            Domain::Psys => "psys",
        }
    }

    /// A bound no real domain reaches, used to tell a reset or bogus read from a wrap and
    /// to choose how often to sample. Generous on purpose: refusing a real reading would
    /// lose energy, while a loose bound only sharpens nothing.
    pub fn max_watts(self) -> f64 {
        match self {
            Domain::Package => 1000.0,
            Domain::Dram => 500.0,
            Domain::Psys => 3000.0,
        }
    }
}

impl fmt::Display for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Domain {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        Domain::ALL
            .into_iter()
            .find(|d| d.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or(())
    }
}
