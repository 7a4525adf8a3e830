//! What a reader is: what it reads (energy or power) of what (packages, the whole node,
//! GPUs), and why it gives nothing where it does.

/// Why a reader gives nothing: the hardware or tool is not there, reading it is not
/// allowed, or it answered something unusable.
#[derive(Debug, Clone, PartialEq)]
pub enum Unavailable {
    Absent(String),
    Denied(String),
    Failed(String),
}

impl Unavailable {
    /// As the JSON's `status` names it.
    pub fn status(&self) -> &'static str {
        match self {
            Unavailable::Absent(_) => "absent",
            Unavailable::Denied(_) => "no permission",
            Unavailable::Failed(_) => "failed",
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            Unavailable::Absent(d) | Unavailable::Denied(d) | Unavailable::Failed(d) => d,
        }
    }
}

/// What one read returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// A counter's joules: the energy of a window is the difference of two reads.
    Energy,
    /// Watts now: the energy of a window is its samples integrated.
    Power,
}

/// What the hardware a reader reads covers, which decides what it can be set against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The CPU packages and their DRAM (RAPL).
    Packages,
    /// The whole node at its power supplies, as its BMC or node controller sees it.
    WholeNode,
    /// GPU boards.
    Gpus,
}

/// An open reader (its name is its [`Slot`]'s: the BMC's is `bmc` whichever tool reads it,
/// and [`crate::check::compare`] pairs plugins with readers by those names).
pub trait Reader {
    /// Through what, for the report (the BMC's: which tool).
    fn path(&self) -> String;
    fn scope(&self) -> Scope;
    fn quantity(&self) -> Quantity;
    /// Joules ([`Quantity::Energy`]) or watts ([`Quantity::Power`]).
    fn read(&mut self) -> Result<f64, Unavailable>;
    /// When the hardware took the value the last read returned, where it says so (a node
    /// controller's scan time): the value is of then, not of the read, which a loaded node
    /// may make late by a scan or more.
    fn stamped(&self) -> Option<std::time::SystemTime> {
        None
    }
}

/// A reader that could be opened (it has answered once), or why not.
pub struct Slot {
    /// `rapl-perf`, `bmc`, `redfish`, `pm_counters`, `nvidia-smi`, `amd-smi`.
    pub name: &'static str,
    pub scope: Scope,
    pub reader: Result<Box<dyn Reader>, Unavailable>,
}

pub(super) fn boxed<R: Reader + 'static>(r: R) -> Box<dyn Reader> {
    Box::new(r)
}
