//! Test clusters run side by side on one host. Each claims a slot, a number K in
//! 1..=SLOT_COUNT, by creating SLOTS_DIR/K (mkdir is atomic); the slot gives it a job-id
//! range (FirstJobId=K*JOBS_PER_SLOT+1, so Slurm's cgroups, named by job id, never meet)
//! and four TCP ports (of five reserved per slot) below the kernel's ephemeral range (so no
//! port picked by bind(0) elsewhere can take one). `down` frees the slot; a slot whose
//! cluster directory is gone (a test killed before its `down`) is taken over.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use super::{Error, MARKER};

const SLOT_COUNT: u32 = 800;
pub const JOBS_PER_SLOT: u32 = 10_000;
const PORT_BASE: u32 = 20_000;

/// Where the slots are: `CLUSTER_SLOTS_DIR`, else one directory for the whole machine.
pub fn slots_dir() -> PathBuf {
    std::env::var_os("CLUSTER_SLOTS_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| "/tmp/slurm-test-cluster-slots".into(), PathBuf::from)
}

/// A slot: its number gives the cluster its ports and job ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot(pub u32);

/// The TCP ports of a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    pub slurmctld: u16,
    pub slurmd: u16,
    pub slurmdbd: u16,
    pub mariadb: u16,
}

impl Slot {
    pub fn ports(self) -> Ports {
        let base = PORT_BASE + self.0 * 5;
        // SLOT_COUNT * 5 + PORT_BASE + 3 < 65536
        let port = |i: u32| u16::try_from(base + i).unwrap_or(u16::MAX);
        Ports {
            slurmctld: port(0),
            slurmd: port(1),
            slurmdbd: port(2),
            mariadb: port(3),
        }
    }

    pub fn first_job_id(self) -> u32 {
        self.0 * JOBS_PER_SLOT + 1
    }

    /// The job ids its cluster's jobs get.
    pub fn job_ids(self) -> std::ops::Range<u32> {
        self.first_job_id()..self.first_job_id() + JOBS_PER_SLOT
    }

    /// Claims a free slot for the cluster in `dir`, starting at one derived from `dir`'s
    /// hash so that parallel clusters rarely race for one.
    pub fn claim(slots: &Path, dir: &Path, hash: u64) -> Result<Slot, Error> {
        fs::create_dir_all(slots).map_err(|e| Error::io(slots, e))?;
        let start = u32::try_from(hash % u64::from(SLOT_COUNT)).unwrap_or(0);
        for i in 0..SLOT_COUNT {
            let k = (start + i) % SLOT_COUNT + 1;
            let path = slots.join(k.to_string());
            if fs::create_dir(&path).is_err() {
                let Ok(owner) = fs::read_to_string(path.join("dir")) else {
                    continue; // being claimed now
                };
                if Path::new(owner.trim_end()).join(MARKER).exists() {
                    continue;
                }
                // its cluster is gone: take the slot over (one claimer wins the rename)
                let stale = slots.join(format!("{k}.stale.{}", std::process::id()));
                if fs::rename(&path, &stale).is_err() {
                    continue;
                }
                let _ = fs::remove_dir_all(&stale);
                if fs::create_dir(&path).is_err() {
                    continue;
                }
            }
            fs::write(path.join("dir"), format!("{}\n", dir.display()))
                .map_err(|e| Error::io(&path, e))?;
            let slot = Slot(k);
            if slot.ports_free() {
                return Ok(slot);
            }
            let _ = fs::remove_dir_all(&path);
        }
        Err(Error::Setup(format!(
            "no free cluster slot in {} (all {SLOT_COUNT} taken or their ports in use)",
            slots.display()
        )))
    }

    /// All of the slot's ports free on loopback (something else on the host may hold one).
    fn ports_free(self) -> bool {
        let p = self.ports();
        [p.slurmctld, p.slurmd, p.slurmdbd, p.mariadb]
            .into_iter()
            .all(|port| TcpListener::bind(("127.0.0.1", port)).is_ok())
    }

    /// Gives the slot back, if `dir`'s cluster still holds it.
    pub fn free(self, slots: &Path, dir: &Path) {
        let path = slots.join(self.0.to_string());
        if fs::read_to_string(path.join("dir")).is_ok_and(|o| Path::new(o.trim_end()) == dir) {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_has_its_own_ports_and_job_ids() {
        let s = Slot(3);
        assert_eq!(
            s.ports(),
            Ports {
                slurmctld: 20_015,
                slurmd: 20_016,
                slurmdbd: 20_017,
                mariadb: 20_018
            }
        );
        assert_eq!(s.first_job_id(), 30_001);
        assert!(
            Slot(SLOT_COUNT).ports().mariadb < 32_768,
            "below the ephemeral range"
        );
    }

    #[test]
    fn two_clusters_get_two_slots_and_a_dead_clusters_slot_is_taken_over() {
        let tmp = tempfile::tempdir().expect("tmp");
        let slots = tmp.path().join("slots");
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        for d in [&a, &b] {
            fs::create_dir(d).expect("dir");
            fs::write(d.join(MARKER), "").expect("marker");
        }
        let sa = Slot::claim(&slots, &a, 41).expect("a's slot");
        let sb = Slot::claim(&slots, &b, 41).expect("b's slot");
        assert_ne!(sa, sb);
        // a's directory is gone: its slot goes to the next claimer
        fs::remove_dir_all(&a).expect("rm a");
        let c = tmp.path().join("c");
        assert_eq!(Slot::claim(&slots, &c, 41).expect("c's slot"), sa);
        sb.free(&slots, &a);
        assert!(
            slots.join(sb.0.to_string()).exists(),
            "b's slot is not a's to free"
        );
        sb.free(&slots, &b);
        assert!(!slots.join(sb.0.to_string()).exists());
    }
}
