//! Slurm's step record, as slurmstepd hands it at `ENERGY_DATA_STEP_PTR`: the step's user
//! and its GPUs, shards and MPS share on this node ([`Grant`]), read where Slurm's own
//! GRES plugins read them (the credential's lists, this node's part).
//!
//! `stepd_step_rec_t` and the GRES states are internal to Slurm: their offsets are known
//! only for the release series measured ([`slurm_sys::STEP_RECORD`]); on any other the
//! record is not read at all. Nothing in it is dereferenced: every field, string, list node
//! and bitmap is copied out through [`own_memory`], where a bad pointer is an error, and
//! strings and lists are read up to a bound. What is read is checked before the rest is
//! trusted: the record's job and step must be this slurmstepd's own (its title, set by
//! Slurm before the call), its user the name the user database gives its uid, each list
//! must carry `list_t`'s magic, each GRES state must be this node's alone (one node), and a
//! bitmap must carry `bitstr_t`'s magic and be of a sane size. Any mismatch gives no grant
//! and an error naming the release: never a guess.

use nix::errno::Errno;
use nix::unistd::{Uid, User};
use slurm_sys::{
    BITSTR_MAGIC, BITSTR_OVERHEAD, LIST_HEAD, LIST_MAGIC, LIST_NODE_DATA, LIST_NODE_NEXT,
    MEASURED_RELEASES, STEP_RECORD, StepRecordLayout,
};

use super::own_memory::{self, Unreadable};
use slurm_energy_logic::RecordRefused;
use slurm_energy_logic::{Grant, GresHeld};
use slurm_energy_logic::{StepId, StepKey};

/// The GRES that say which GPUs a step holds.
const GPU_GRES: [&str; 3] = ["gpu", "shard", "mps"];

/// A bitmap larger than this is not a node's GRES.
const MAX_BITS: i64 = 65_536;

/// A GRES list longer than this is not a step's: Slurm has a few kinds of GRES per node.
const MAX_GRES: usize = 256;

/// A user name longer than this is not one (Linux's `useradd` allows 32 bytes).
const MAX_USER_NAME: usize = 256;

/// `gres_build_id()` (gres.c, the same in every release): the id of a GRES plugin by name.
fn gres_build_id(name: &str) -> u32 {
    let mut id: u32 = 0;
    let mut shift = 0;
    for byte in name.bytes() {
        // C's `char` is signed on x86-64; GRES names are ASCII
        id = id.wrapping_add(u32::from(byte) << shift);
        shift = (shift + 8) % 32;
    }
    id
}

/// Which of a GRES state's layouts: a job's or a step's.
#[derive(Clone, Copy)]
enum Level {
    Job,
    Step,
}

fn release(v: u32) -> String {
    format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
}

/// The running Slurm's release: the one built for, which Slurm's loader requires.
fn running() -> String {
    release(slurm_sys::SLURM_VERSION_NUMBER)
}

/// Why a read through the record failed, naming the release whose layout it assumed.
fn unreadable(e: Unreadable) -> String {
    format!(
        "Slurm's step record cannot be read: {e}: the record is not laid out as in Slurm {} \
         (the release built for)",
        running()
    )
}

/// This slurmstepd's job and step, from the title Slurm gives it before it loads plugins.
pub fn own_step() -> Option<StepKey> {
    let title = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    slurm_energy_logic::own_step(&String::from_utf8_lossy(&title).replace('\0', " "))
}

/// What Slurm's step record at `step` grants this slurmstepd's step, or why it is not
/// read. `step` is what slurmstepd passes at `ENERGY_DATA_STEP_PTR`; nothing at it is
/// dereferenced, so any value is safe.
pub fn grant(step: usize) -> Result<Grant, RecordRefused> {
    let user_of = |uid| User::from_uid(Uid::from_raw(uid)).map(|u| u.map(|u| u.name));
    grant_in(step, STEP_RECORD.as_ref(), own_step(), user_of)
}

/// The grant in the record at `step` read with `layout`; `None`: this release's layout was
/// never measured, and the record is not read ([`RecordRefused::NotMeasured`]).
fn grant_in(
    step: usize,
    layout: Option<&StepRecordLayout>,
    own: Option<StepKey>,
    user_of: impl Fn(u32) -> Result<Option<String>, Errno>,
) -> Result<Grant, RecordRefused> {
    match layout {
        Some(layout) => read_grant(step, layout, own, user_of).map_err(RecordRefused::Failed),
        None => Err(RecordRefused::NotMeasured(not_measured())),
    }
}

/// Why a release whose layout was never measured has its record not read.
fn not_measured() -> String {
    let measured: Vec<String> = MEASURED_RELEASES.iter().map(|&v| release(v)).collect();
    format!(
        "Slurm {}: the layout of its step record (stepd_step_rec_t) was not measured for \
         this release series (measured: {}), so the record is not read",
        running(),
        measured.join(", ")
    )
}

/// The grant in the record at `step` read with `layout`, for the slurmstepd of step `own`,
/// the record's user checked against `user_of` its uid.
fn read_grant(
    step: usize,
    layout: &StepRecordLayout,
    own: Option<StepKey>,
    user_of: impl Fn(u32) -> Result<Option<String>, Errno>,
) -> Result<Grant, String> {
    if step == 0 {
        return Err("no step record".into());
    }
    let at = |offset: usize| step.wrapping_add(offset);
    let job = own_memory::u32_at(
        "the step record's job id",
        at(layout.step_id + layout.step_id_job),
    )
    .map_err(unreadable)?;
    let step_id = own_memory::u32_at(
        "the step record's step id",
        at(layout.step_id + layout.step_id_step),
    )
    .map_err(unreadable)?;
    if own != Some(StepKey::new(job, StepId(step_id))) {
        return Err(format!(
            "Slurm's step record names step {job}.{step_id}, this slurmstepd is {own:?}: the \
             record is not laid out as in Slurm {} (the release built for)",
            running()
        ));
    }
    let uid = own_memory::u32_at("the step record's uid", at(layout.uid)).map_err(unreadable)?;
    let name = own_memory::pointer_at("the step record's user_name", at(layout.user_name))
        .and_then(|p| own_memory::c_string("the step record's user_name", p, MAX_USER_NAME))
        .map_err(unreadable)?;
    let user = String::from_utf8_lossy(&name).into_owned();
    check_user(uid, &user, user_of(uid))?;
    let list = |offset, what| own_memory::pointer_at(what, at(offset)).map_err(unreadable);
    let step_list = list(layout.step_gres_list, "the step record's step_gres_list")?;
    let mut gres = held(layout, step_list, Level::Step)?;
    // the batch, interactive and extern steps hold their job's GRES and Slurm gives them
    // no step list of their own; a step launched by srun holds only what its list says
    let whole_job = matches!(
        StepId(step_id),
        StepId::BATCH | StepId::INTERACTIVE | StepId::EXTERN
    );
    if gres.is_empty() && whole_job {
        let job_list = list(layout.job_gres_list, "the step record's job_gres_list")?;
        gres = held(layout, job_list, Level::Job)?;
    }
    Ok(Grant {
        job,
        step: step_id,
        uid,
        user,
        gres,
        stepd: None,
    })
}

/// The record's user must be the name the user database gives its uid: a record whose
/// `uid` and `user_name` do not agree is not laid out as this build believes.
fn check_user(
    uid: u32,
    recorded: &str,
    passwd: Result<Option<String>, Errno>,
) -> Result<(), String> {
    let why = match passwd {
        Ok(Some(name)) if name == recorded => return Ok(()),
        Ok(Some(name)) => format!("uid {uid} is \"{name}\" on this node"),
        Ok(None) => format!("uid {uid} is no user of this node, so it cannot be checked"),
        Err(e) => format!("the user database cannot say who uid {uid} is ({e})"),
    };
    Err(format!(
        "Slurm's step record names user \"{}\" but {why}: the record is not laid out as in \
         Slurm {} (the release built for), and is not trusted",
        recorded.escape_debug(),
        running()
    ))
}

/// The GPU GRES a list of `gres_state_t` at `list` (0: none) holds on this node, the list
/// walked through its nodes up to [`MAX_GRES`].
fn held(layout: &StepRecordLayout, list: usize, level: Level) -> Result<Vec<GresHeld>, String> {
    if list == 0 {
        return Ok(Vec::new());
    }
    let not_a_list = || {
        format!(
            "the step record's GRES list is not a Slurm list: the record is not laid out as \
             in Slurm {}",
            running()
        )
    };
    if own_memory::u32_at("the step record's GRES list", list).map_err(unreadable)? != LIST_MAGIC {
        return Err(not_a_list());
    }
    let mut out = Vec::new();
    let mut node =
        own_memory::pointer_at("the GRES list's head", list + LIST_HEAD).map_err(unreadable)?;
    let mut walked = 0;
    while node != 0 {
        walked += 1;
        if walked > MAX_GRES {
            return Err(format!(
                "the step record's GRES list has more than {MAX_GRES} elements: the record \
                 is not laid out as in Slurm {}",
                running()
            ));
        }
        let state = own_memory::pointer_at("a GRES list node", node.wrapping_add(LIST_NODE_DATA))
            .map_err(unreadable)?;
        if let Some(h) = gres_state(layout, state, level)? {
            out.push(h);
        }
        node = own_memory::pointer_at("a GRES list node", node.wrapping_add(LIST_NODE_NEXT))
            .map_err(unreadable)?;
    }
    Ok(out)
}

/// One `gres_state_t` at `state`, if of a GPU GRES.
fn gres_state(
    layout: &StepRecordLayout,
    state: usize,
    level: Level,
) -> Result<Option<GresHeld>, String> {
    let plugin_id = own_memory::u32_at("a GRES state", state.wrapping_add(layout.gres_plugin_id))
        .map_err(unreadable)?;
    let Some(name) = GPU_GRES.iter().find(|n| gres_build_id(n) == plugin_id) else {
        return Ok(None);
    };
    let data = own_memory::pointer_at("a GRES state", state.wrapping_add(layout.gres_data))
        .map_err(unreadable)?;
    if data == 0 {
        return Ok(None);
    }
    let (node_cnt, bits, counts) = match level {
        Level::Job => (
            layout.job_node_cnt,
            layout.job_bit_alloc,
            layout.job_cnt_node_alloc,
        ),
        Level::Step => (
            layout.step_node_cnt,
            layout.step_bit_alloc,
            layout.step_cnt_node_alloc,
        ),
    };
    let field = |offset: usize| data.wrapping_add(offset);
    let nodes =
        own_memory::u32_at("a GRES state's node_cnt", field(node_cnt)).map_err(unreadable)?;
    // slurmstepd keeps this node's part of the credential's lists: one node
    if nodes != 1 {
        return Err(format!(
            "the step record's {name} GRES covers {nodes} nodes, not this node alone: the \
             record is not laid out as in Slurm {}",
            running()
        ));
    }
    let per_node = |what, offset| own_memory::pointer_at(what, field(offset)).map_err(unreadable);
    // per-node arrays of one element each
    let count = match per_node("a GRES state's gres_cnt_node_alloc", counts)? {
        0 => 0,
        array => own_memory::u64_at("a GRES state's count", array).map_err(unreadable)?,
    };
    let indexes = match per_node("a GRES state's gres_bit_alloc", bits)? {
        0 => Vec::new(),
        array => {
            let bitmap =
                own_memory::pointer_at("a GRES state's bitmap", array).map_err(unreadable)?;
            bits_set(name, bitmap)?
        }
    };
    Ok(Some(GresHeld {
        name: (*name).to_string(),
        count,
        indexes,
    }))
}

// `bitstr_t`'s bits are read as bytes of little-endian words
const _: () = assert!(cfg!(target_endian = "little"));

/// The bits set in the `bitstr_t` at `bitmap` (0: none).
fn bits_set(name: &str, bitmap: usize) -> Result<Vec<u32>, String> {
    if bitmap == 0 {
        return Ok(Vec::new());
    }
    let word = |i: usize| {
        own_memory::i64_at("a GRES bitmap", bitmap.wrapping_add(8 * i)).map_err(unreadable)
    };
    let (magic, size) = (word(0)?, word(1)?);
    if magic != BITSTR_MAGIC || !(0..=MAX_BITS).contains(&size) {
        return Err(format!(
            "the step record's {name} bitmap is not a Slurm bitmap (magic {magic:#x}, {size} \
             bits): the record is not laid out as in Slurm {}",
            running()
        ));
    }
    let mut words = vec![0u8; (size as usize).div_ceil(64) * 8];
    own_memory::read(
        "a GRES bitmap",
        bitmap.wrapping_add(8 * BITSTR_OVERHEAD),
        &mut words,
    )
    .map_err(unreadable)?;
    Ok((0..size as usize)
        .filter(|bit| words[bit / 8] & (1 << (bit % 8)) != 0)
        .map(|bit| bit as u32)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids Slurm's `gres_build_id()` gives (computed with Slurm's own C function).
    #[test]
    fn gres_ids_are_slurms() {
        assert_eq!(gres_build_id("gpu"), 7696487);
        assert_eq!(gres_build_id("shard"), 1_918_986_455);
        assert_eq!(gres_build_id("mps"), 7565421);
    }

    /// An address never mapped: Linux keeps the first page unmapped (`vm.mmap_min_addr`).
    const UNMAPPED: usize = 0x100;

    /// Memory laid out as Slurm 22.05.8's, kept alive for the test's reads.
    struct Fake {
        layout: StepRecordLayout,
        blocks: Vec<Box<[u8]>>,
    }

    impl Fake {
        fn new() -> Self {
            Self {
                layout: slurm_sys::step_record_layout(0x16_05_08).expect("22.05 measured"),
                blocks: Vec::new(),
            }
        }

        /// A block of `len` bytes with `fields` (offset, bytes) written; its address.
        fn block(&mut self, len: usize, fields: &[(usize, Vec<u8>)]) -> usize {
            let mut b = vec![0u8; len].into_boxed_slice();
            for (offset, bytes) in fields {
                b[*offset..offset + bytes.len()].copy_from_slice(bytes);
            }
            let at = b.as_ptr() as usize;
            self.blocks.push(b);
            at
        }

        /// One `gres_state_t` of a step, `name` with `count` on GPUs `bits` of `size`.
        fn step_gres(&mut self, name: &str, count: u64, bits: &[u32], size: i64) -> usize {
            let mut words = vec![0u64; (size as usize).div_ceil(64)];
            for &b in bits {
                words[b as usize / 64] |= 1 << (b % 64);
            }
            let mut bitmap = [BITSTR_MAGIC.to_ne_bytes(), size.to_ne_bytes()].concat();
            words.iter().for_each(|w| bitmap.extend(w.to_ne_bytes()));
            let bitmap = self.block(bitmap.len(), &[(0, bitmap.clone())]);
            let bit_alloc = self.block(8, &[(0, bitmap.to_ne_bytes().to_vec())]);
            let cnt = self.block(8, &[(0, count.to_ne_bytes().to_vec())]);
            let l = self.layout;
            let data = self.block(
                256,
                &[
                    (l.step_node_cnt, 1u32.to_ne_bytes().to_vec()),
                    (l.step_bit_alloc, bit_alloc.to_ne_bytes().to_vec()),
                    (l.step_cnt_node_alloc, cnt.to_ne_bytes().to_vec()),
                ],
            );
            let id = gres_build_id(name).to_ne_bytes().to_vec();
            self.block(
                16,
                &[
                    (l.gres_plugin_id, id),
                    (l.gres_data, data.to_ne_bytes().to_vec()),
                ],
            )
        }

        /// A `list_t` of `states`; `looped`: its last node leads back to its first.
        fn list(&mut self, states: &[usize], looped: bool) -> usize {
            let mut next = 0usize;
            let mut first = 0;
            for (i, state) in states.iter().rev().enumerate() {
                let node = self.block(16, &[(LIST_NODE_DATA, state.to_ne_bytes().to_vec())]);
                if i == 0 {
                    first = node;
                }
                self.set(node + LIST_NODE_NEXT, next);
                next = node;
            }
            if looped {
                self.set(first + LIST_NODE_NEXT, next);
            }
            let magic = LIST_MAGIC.to_ne_bytes().to_vec();
            self.block(64, &[(0, magic), (LIST_HEAD, next.to_ne_bytes().to_vec())])
        }

        /// Writes the address `value` at `at`, within one of this fake's blocks.
        fn set(&mut self, at: usize, value: usize) {
            let b = self
                .blocks
                .iter_mut()
                .find(|b| (b.as_ptr() as usize..b.as_ptr() as usize + b.len()).contains(&at))
                .expect("a block");
            let offset = at - b.as_ptr() as usize;
            b[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
        }

        /// The record of step 7.0 of uid 1000, its user at `user`, its GRES list `gres`.
        fn record(&mut self, user: usize, gres: usize) -> usize {
            let l = self.layout;
            self.block(
                1024,
                &[
                    (l.step_id + l.step_id_job, 7u32.to_ne_bytes().to_vec()),
                    (l.step_id + l.step_id_step, 0u32.to_ne_bytes().to_vec()),
                    (l.uid, 1000u32.to_ne_bytes().to_vec()),
                    (l.user_name, user.to_ne_bytes().to_vec()),
                    (l.step_gres_list, gres.to_ne_bytes().to_vec()),
                ],
            )
        }

        fn read(&self, record: usize) -> Result<Grant, String> {
            read_grant(
                record,
                &self.layout,
                Some(StepKey::new(7, StepId(0))),
                alice,
            )
        }
    }

    fn alice(uid: u32) -> Result<Option<String>, Errno> {
        Ok((uid == 1000).then(|| "alice".to_string()))
    }

    fn name(text: &std::ffi::CStr) -> usize {
        text.as_ptr() as usize
    }

    /// A record laid out as measured grants what its list holds: the GPUs of its bitmap.
    #[test]
    fn a_record_is_read_without_dereferencing_it() {
        let mut fake = Fake::new();
        let gpu = fake.step_gres("gpu", 2, &[1, 3], 4);
        let other = fake.step_gres("tmpfs", 1, &[0], 1);
        let list = fake.list(&[other, gpu], false);
        let record = fake.record(name(c"alice"), list);
        let held = GresHeld {
            name: "gpu".into(),
            count: 2,
            indexes: vec![1, 3],
        };
        let expected = Grant {
            job: 7,
            step: 0,
            uid: 1000,
            user: "alice".into(),
            gres: vec![held],
            stepd: None,
        };
        assert_eq!(fake.read(record), Ok(expected));
    }

    /// A pointer in the record or below it that leads nowhere is an error naming it, where
    /// a dereference would kill slurmstepd.
    #[test]
    fn a_bad_pointer_in_the_record_is_an_error_not_a_crash() {
        let mut fake = Fake::new();
        let record = fake.record(UNMAPPED, 0);
        let err = fake.read(record).expect_err("unreadable user_name");
        assert!(
            err.contains("user_name at 0x100 cannot be read (EFAULT"),
            "{err}"
        );
        let record = fake.record(name(c"alice"), UNMAPPED);
        let err = fake.read(record).expect_err("unreadable list");
        assert!(err.contains("GRES list at 0x100 cannot be read"), "{err}");
        let gpu = fake.step_gres("gpu", 1, &[0], 1);
        let list = fake.list(&[gpu], false);
        let node = own_memory::pointer_at("head", list + LIST_HEAD).expect("head");
        fake.set(node + LIST_NODE_NEXT, UNMAPPED);
        let record = fake.record(name(c"alice"), list);
        let err = fake.read(record).expect_err("bad node");
        assert!(err.contains("list node at 0x100 cannot be read"), "{err}");
        assert!(fake.read(UNMAPPED).is_err());
    }

    /// A list whose nodes loop is walked a bounded number of steps, then refused.
    #[test]
    fn a_looping_list_is_refused_not_walked_forever() {
        let mut fake = Fake::new();
        let tmpfs = fake.step_gres("tmpfs", 1, &[0], 1);
        let list = fake.list(&[tmpfs, tmpfs], true);
        let record = fake.record(name(c"alice"), list);
        let err = fake.read(record).expect_err("loop");
        assert!(err.contains("more than 256 elements"), "{err}");
    }

    /// A record whose user is not its uid's, or whose uid is no user here, is not laid
    /// out as believed: refused, saying so.
    #[test]
    fn a_user_name_that_is_not_the_uids_refuses_the_record() {
        let mut fake = Fake::new();
        let record = fake.record(name(c"mallory"), 0);
        let err = fake.read(record).expect_err("another name");
        assert!(
            err.contains("names user \"mallory\" but uid 1000 is \"alice\" on this node"),
            "{err}"
        );
        let nobody = |_| Ok(None);
        let err = read_grant(
            record,
            &fake.layout,
            Some(StepKey::new(7, StepId(0))),
            nobody,
        )
        .expect_err("no such uid");
        assert!(err.contains("uid 1000 is no user of this node"), "{err}");
        let down = |_| Err(Errno::EIO);
        let err = read_grant(record, &fake.layout, Some(StepKey::new(7, StepId(0))), down)
            .expect_err("no user database");
        assert!(err.contains("cannot say who uid 1000 is"), "{err}");
        // the same record with its user's own name is accepted
        let record = fake.record(name(c"alice"), 0);
        assert_eq!(fake.read(record).map(|g| g.user), Ok("alice".to_string()));
    }

    /// A release whose layout was never measured is not read at all, whatever the
    /// pointer: the error names the running release and the measured ones.
    #[test]
    fn an_unmeasured_layout_refuses_the_record() {
        let mut fake = Fake::new();
        let record = fake.record(name(c"alice"), 0);
        let err = grant_in(record, None, Some(StepKey::new(7, StepId(0))), alice)
            .expect_err("unmeasured")
            .to_string();
        assert!(
            err.starts_with(&format!(
                "Slurm {}: the layout of its step record",
                running()
            )),
            "{err}"
        );
        assert!(err.contains("measured: 22.05.8, 23.02.7"), "{err}");
        assert!(grant_in(UNMAPPED, None, None, alice).is_err());
    }
}
