//! slurmd's answers to Slurm's periodic polls in a file of fixed slots, one per step: a
//! step's read is one `pread` of its own slot, never a wake-up of slurmd, never a parse of
//! the node's other jobs. One definition of the format for both ends. (`StepFigure` does
//! not read it yet: wired in, a cluster test's two side-by-side jobs came out 0.45% over
//! their union; see BENCHMARKS.md, "The slots file".)
//!
//! The file (`energy-ledger.N.slots`, beside the ledger in SlurmdSpoolDir, root's 0600 like
//! the ledger, opened only as [`crate::ledger::open_trusted`] allows) is a header written once, the
//! node's block (the update's figures that are the node's: its account, its parts, the
//! split) and a table of slots, each a step's key and account with the update's epoch,
//! time, split and the node's account. A step's slot is found by its key's hash, probing
//! at most [`PROBES`] slots forward (the table is never wrapped: it has `PROBES - 1` slots
//! past its capacity), so a read is one `pread` of `PROBES` slots at a place the key and
//! the file's seed decide, however many jobs the node runs. The key is checked: a step
//! never takes another's slot for its own.
//!
//! A job's owner chooses which of their steps stay alive, so they could keep alive only
//! keys of one neighbourhood. The hash is seeded (a random seed per slurmd, in the header:
//! only root reads the file), so which keys collide cannot be known outside, and the
//! table never grows past [`MAX_GROWTH`] times what its steps need: a key that finds no
//! free slot within its probe gets none, and its step asks slurmd on the socket.
//!
//! slurmd writes the node's block and the whole table with one `pwrite` at each update
//! ([`Table::write`]), and builds a new file (written whole, renamed over the old one,
//! whose length it then cuts to 0) only when the table must grow or may shrink: a step
//! holding the old file reads nothing from it and opens the new one. The table holds at
//! least twice the steps the ledger keeps (which it bounds: running steps and a few ended
//! ones per job), a power of two.
//!
//! Torn reads: a `pread` that runs while slurmd's `pwrite` copies into the same pages
//! may see part of the old bytes and part of the new. Linux serialises writers to a file
//! (the inode's lock), but a buffered read takes no lock the writer holds: it copies from
//! the page cache while the writer copies into it, and neither copy is atomic beyond a
//! word (nor is a page written in one step). So each record (a slot, the node's block)
//! is framed by the update's sequence number in its first and last 8 bytes and carries a
//! checksum of what comes before its end: a copy made in address order (as the kernel's
//! are) that overlaps a write sees two different sequence numbers, and any other mix of
//! old and new bytes fails the checksum. A torn read is retried ([`TRIES`]), then the step
//! asks slurmd on the socket as before ([`super::ask`]).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::ask::Answer;
use crate::attribution::{StepId, StepKey};
use crate::ledger::{Account, Ledger, LedgerError, Part, open_trusted, spool_of};
use crate::replace::{Access, replace};
use crate::trusted_dir::{self, NO_WRITE};

/// `energy-ledger.N.slots` beside the ledger `energy-ledger.N.json`.
pub(crate) fn slots_path(ledger: &Path) -> PathBuf {
    ledger.with_extension("slots")
}

const MAGIC: &[u8; 8] = b"ledslots";
/// The format; a reader refuses any other (and asks slurmd on the socket). 2: the seed.
const FORMAT: u32 = 2;
const HEADER: usize = 64;
const NODE_SIZE: usize = 1024;
const SLOT_SIZE: usize = 128;
/// How many slots a key's probe covers: the table grows before a key would need more.
pub(crate) const PROBES: usize = 8;
/// The smallest table: a node's few jobs fit without a rebuild.
const MIN_CAPACITY: usize = 64;
/// How many times its steps' capacity ([`capacity_for`]) a table may grow to spread keys
/// that share a neighbourhood: past it, the keys left over ask slurmd.
const MAX_GROWTH: usize = 4;
/// Where the header keeps the hash's seed.
const SEED_AT: usize = 40;
/// How many times a torn read is read again before the step asks slurmd.
const TRIES: usize = 4;
/// The node's parts the node's block holds, and the longest label: a node with more, or
/// longer, is read on the socket.
const MAX_PARTS: usize = 16;
const PART_SIZE: usize = 56;
const MAX_LABEL: usize = 39;

/// Where the node's block and the slots begin.
const NODE_AT: usize = HEADER;
const SLOTS_AT: usize = NODE_AT + NODE_SIZE;

/// The sequence number at both ends of a record and the checksum of what it holds.
fn frame(record: &mut [u8], seq: u64) {
    let end = record.len();
    record[..8].copy_from_slice(&seq.to_le_bytes());
    let sum = checksum(&record[..end - 16]);
    record[end - 16..end - 8].copy_from_slice(&sum.to_le_bytes());
    record[end - 8..].copy_from_slice(&seq.to_le_bytes());
}

/// What a record read says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framed {
    /// All zero: no record was ever written there.
    Empty,
    /// Whole, of the update with this sequence number.
    Whole(u64),
    /// Torn by a write while it was read.
    Torn,
}

fn unframe(record: &[u8]) -> Framed {
    let end = record.len();
    let head = u64_at(record, 0);
    let tail = u64_at(record, end - 8);
    if head == 0 && tail == 0 && record.iter().all(|&b| b == 0) {
        return Framed::Empty;
    }
    if head == tail && u64_at(record, end - 16) == checksum(&record[..end - 16]) {
        Framed::Whole(head)
    } else {
        Framed::Torn
    }
}

/// A checksum of `bytes` (a multiple of 8 long) a word at a time: the same on every node
/// and release, a few ns per slot (slurmd sums every slot at each update). Not a defence
/// against anyone (the file is root's): it tells a torn read, whose mix of two writes'
/// words changes the sum but for a chance of 2^-64.
fn checksum(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(8)
        .fold(0x9e37_79b9_7f4a_7c15, |h, word| {
            let mut w = [0u8; 8];
            w.copy_from_slice(word);
            let h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0xff51_afd7_ed55_8ccd);
            h ^ (h >> 29)
        })
}

/// A key's first slot in a table of `capacity` (a power of two) whose hash is seeded with
/// `seed`: splitmix64's finaliser, so neighbouring job ids spread over the table.
fn home(key: StepKey, capacity: usize, seed: u64) -> usize {
    let mut z = ((u64::from(key.job) << 32) | u64::from(key.step.0)) ^ seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z as usize) & (capacity - 1)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(word)
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(word)
}

fn f64_at(b: &[u8], at: usize) -> f64 {
    f64::from_bits(u64_at(b, at))
}

fn put(b: &mut [u8], at: usize, bytes: &[u8]) {
    b[at..at + bytes.len()].copy_from_slice(bytes);
}

fn put_account(b: &mut [u8], at: usize, a: Account) {
    put(b, at, &a.joules.to_le_bytes());
    put(b, at + 8, &a.watts.to_le_bytes());
    put(b, at + 16, &a.since.to_le_bytes());
}

fn account_at(b: &[u8], at: usize) -> Account {
    Account {
        joules: f64_at(b, at),
        watts: f64_at(b, at + 8),
        since: f64_at(b, at + 16),
    }
}

fn shares_byte(shares: Option<bool>) -> u8 {
    match shares {
        None => 0,
        Some(false) => 1,
        Some(true) => 2,
    }
}

fn shares_of(byte: u8) -> Option<bool> {
    match byte {
        1 => Some(false),
        2 => Some(true),
        _ => None,
    }
}

/// The update's figures as a slot or the node's block says them (a slot: `step` its account).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Update {
    epoch: u64,
    sampled_at: f64,
    shares: Option<bool>,
    node: Account,
}

// A slot: seq, job @8, step @12, epoch @16, sampled_at @24, node @32, step's account @56,
// shares @80, checksum and seq in its last 16 bytes.
fn encode_slot(slot: &mut [u8], seq: u64, key: StepKey, update: Update, account: Account) {
    put(slot, 8, &key.job.to_le_bytes());
    put(slot, 12, &key.step.0.to_le_bytes());
    put(slot, 16, &update.epoch.to_le_bytes());
    put(slot, 24, &update.sampled_at.to_le_bytes());
    put_account(slot, 32, update.node);
    put_account(slot, 56, account);
    slot[80] = shares_byte(update.shares);
    frame(slot, seq);
}

fn decode_slot(slot: &[u8]) -> (StepKey, Update, Account) {
    let key = StepKey {
        job: u32_at(slot, 8),
        step: StepId(u32_at(slot, 12)),
    };
    let update = Update {
        epoch: u64_at(slot, 16),
        sampled_at: f64_at(slot, 24),
        shares: shares_of(slot[80]),
        node: account_at(slot, 32),
    };
    (key, update, account_at(slot, 56))
}

// The node's block: seq, epoch @8, sampled_at @16, node @24, shares @48, parts' count @49,
// whether all parts fit @50, parts from @56 (label's length, label, joules, watts: NaN for
// none), checksum and seq in its last 16 bytes.
const PARTS_AT: usize = 56;

fn encode_node(block: &mut [u8], seq: u64, update: Update, parts: &[Part]) {
    put(block, 8, &update.epoch.to_le_bytes());
    put(block, 16, &update.sampled_at.to_le_bytes());
    put_account(block, 24, update.node);
    block[48] = shares_byte(update.shares);
    let fit = parts.len() <= MAX_PARTS && parts.iter().all(|p| p.label.len() <= MAX_LABEL);
    block[50] = u8::from(fit);
    if fit {
        block[49] = parts.len() as u8;
        for (k, p) in parts.iter().enumerate() {
            let at = PARTS_AT + k * PART_SIZE;
            block[at] = p.label.len() as u8;
            put(block, at + 1, p.label.as_bytes());
            put(block, at + 40, &p.joules.to_le_bytes());
            put(block, at + 48, &p.watts.unwrap_or(f64::NAN).to_le_bytes());
        }
    }
    frame(block, seq);
}

/// The node's block's figures and parts; `None` for parts that did not fit.
fn decode_node(block: &[u8]) -> (Update, Option<Vec<Part>>) {
    let update = Update {
        epoch: u64_at(block, 8),
        sampled_at: f64_at(block, 16),
        shares: shares_of(block[48]),
        node: account_at(block, 24),
    };
    if block[50] != 1 {
        return (update, None);
    }
    let parts = (0..usize::from(block[49]).min(MAX_PARTS))
        .map(|k| {
            let at = PARTS_AT + k * PART_SIZE;
            let len = usize::from(block[at]).min(MAX_LABEL);
            let watts = f64_at(block, at + 48);
            Part {
                label: String::from_utf8_lossy(&block[at + 1..at + 1 + len]).into_owned(),
                joules: f64_at(block, at + 40),
                watts: (!watts.is_nan()).then_some(watts),
            }
        })
        .collect();
    (update, Some(parts))
}

/// The slot each key takes in a table of `capacity` seeded with `seed`, in the keys'
/// order; `None` for a key that would need more than [`PROBES`] probes.
fn place(keys: &[StepKey], capacity: usize, seed: u64) -> Vec<Option<usize>> {
    let mut taken = vec![false; capacity + PROBES - 1];
    keys.iter()
        .map(|&key| {
            let first = home(key, capacity, seed);
            let free = (first..first + PROBES).find(|&i| !taken[i])?;
            taken[free] = true;
            Some(free)
        })
        .collect()
}

/// A seed no one outside slurmd knows: std's per-process random hasher keys (from the
/// kernel's random source).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(u64::from(std::process::id()));
    hasher.finish()
}

/// The table's capacity for `steps`: a power of two at least twice as many.
fn capacity_for(steps: usize) -> usize {
    (2 * steps).next_power_of_two().max(MIN_CAPACITY)
}

/// slurmd's side: the slots file, written at each update.
#[derive(Debug)]
pub(crate) struct Table {
    path: PathBuf,
    /// The file written now, with its table's capacity.
    file: Option<(File, usize)>,
    /// The update's sequence number, never 0 (an empty slot's).
    seq: u64,
    /// Which file of this slurmd's it is, in its header.
    generation: u64,
    /// The hash's seed, in its header.
    seed: u64,
    /// The node's block and the table, as the last update wrote them.
    bytes: Vec<u8>,
}

impl Table {
    pub(crate) fn new(ledger: &Path) -> Self {
        Self {
            path: slots_path(ledger),
            file: None,
            seq: 0,
            generation: 0,
            seed: random_seed(),
            bytes: Vec::new(),
        }
    }

    /// Writes `ledger`'s update: one `pwrite` of the node's block and every slot, or a new
    /// file where the table must grow or may shrink (or none is open yet).
    pub(crate) fn write(&mut self, ledger: &Ledger) -> Result<(), LedgerError> {
        let mut steps: Vec<(StepKey, Account)> = Vec::new();
        for job in ledger.jobs() {
            steps.extend(
                job.steps()
                    .map(|(step, a)| (StepKey { job: job.id, step }, a)),
            );
        }
        let keys: Vec<StepKey> = steps.iter().map(|(k, _)| *k).collect();
        // grown at twice the steps, shrunk past what spreading keys may grow it to (a
        // table grown to spread them is not shrunk at the next update to grow again)
        let limit = MAX_GROWTH * capacity_for(keys.len());
        let fits = |capacity: usize| capacity >= 2 * keys.len() && capacity <= limit;
        let (mut capacity, rebuild) = match &self.file {
            Some((_, capacity)) if fits(*capacity) => (*capacity, false),
            _ => (capacity_for(keys.len()), true),
        };
        let mut rebuild = rebuild;
        let places = loop {
            let places = place(&keys, capacity, self.seed);
            if places.iter().all(Option::is_some) || capacity >= limit {
                break places;
            }
            // too many keys share a neighbourhood: a larger table spreads them
            capacity *= 2;
            rebuild = true;
        };
        self.seq += 1;
        let update = Update {
            epoch: ledger.epoch(),
            sampled_at: ledger.sampled_at(),
            shares: ledger.gives_shares(),
            node: ledger.node(),
        };
        self.bytes.clear();
        self.bytes
            .resize(NODE_SIZE + (capacity + PROBES - 1) * SLOT_SIZE, 0);
        encode_node(
            &mut self.bytes[..NODE_SIZE],
            self.seq,
            update,
            ledger.parts(),
        );
        // a key left without a slot: its step asks slurmd
        for ((key, account), at) in steps.iter().zip(places) {
            let Some(at) = at else { continue };
            let start = NODE_SIZE + at * SLOT_SIZE;
            let slot = &mut self.bytes[start..start + SLOT_SIZE];
            encode_slot(slot, self.seq, *key, update, *account);
        }
        let write = |source| LedgerError::Write {
            path: self.path.display().to_string(),
            source,
        };
        match &self.file {
            Some((file, _)) if !rebuild => file.write_all_at(&self.bytes, NODE_AT as u64),
            _ => return self.rebuild(capacity),
        }
        .map_err(write)
    }

    /// A new file of `capacity` slots holding [`Self::bytes`], renamed over the old one,
    /// whose readers are then told by its length cut to 0 (slurmd's own before it, or a
    /// slurmd's before this one's start).
    fn rebuild(&mut self, capacity: usize) -> Result<(), LedgerError> {
        let write = |source| LedgerError::Write {
            path: self.path.display().to_string(),
            source,
        };
        trusted_dir::check(spool_of(&self.path), NO_WRITE)?;
        let old = match self.file.take() {
            Some((file, _)) => Some(file),
            None => open_trusted(&self.path, true).ok().flatten(),
        };
        self.generation += 1;
        let mut whole = vec![0u8; HEADER];
        whole[..8].copy_from_slice(MAGIC);
        put(&mut whole, 8, &FORMAT.to_le_bytes());
        put(&mut whole, 12, &(SLOT_SIZE as u32).to_le_bytes());
        put(&mut whole, 16, &(capacity as u32).to_le_bytes());
        put(&mut whole, 20, &(PROBES as u32).to_le_bytes());
        put(&mut whole, 24, &(NODE_SIZE as u32).to_le_bytes());
        put(&mut whole, 32, &self.generation.to_le_bytes());
        put(&mut whole, SEED_AT, &self.seed.to_le_bytes());
        whole.extend_from_slice(&self.bytes);
        let access = Access {
            mode: 0o600,
            group: None,
        };
        replace(&self.path, &whole, access).map_err(write)?;
        let file = open_trusted(&self.path, true)?
            .ok_or_else(|| write(std::io::Error::from(std::io::ErrorKind::NotFound)))?;
        if let Some(old) = old {
            let _ = old.set_len(0);
        }
        self.file = Some((file, capacity));
        Ok(())
    }
}

/// What a step's read of its slot found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Slot {
    /// Its figures as of slurmd's last update (the node's parts where it needs them).
    Found(Answer),
    /// The table has no slot of its step, or the node's parts do not fit the file: the
    /// step asks slurmd.
    Missing,
    /// Torn at every try: the step asks slurmd.
    Torn,
    /// The file was replaced (its length cut), or cannot be read: opened again.
    Gone,
}

/// slurmstepd's side: the slots file held open, read at Slurm's periodic polls.
#[derive(Debug)]
pub(crate) struct Reader {
    file: File,
    capacity: usize,
    seed: u64,
}

impl Reader {
    /// The slots file beside the ledger `ledger`, if slurmd writes one of this format.
    pub(crate) fn open(ledger: &Path) -> Option<Self> {
        let file = open_trusted(&slots_path(ledger), false).ok()??;
        let mut header = [0u8; HEADER];
        file.read_exact_at(&mut header, 0).ok()?;
        let capacity = u32_at(&header, 16) as usize;
        let known = &header[..8] == MAGIC
            && u32_at(&header, 8) == FORMAT
            && u32_at(&header, 12) as usize == SLOT_SIZE
            && u32_at(&header, 20) as usize == PROBES
            && u32_at(&header, 24) as usize == NODE_SIZE
            && capacity.is_power_of_two();
        known.then_some(Self {
            file,
            capacity,
            seed: u64_at(&header, SEED_AT),
        })
    }

    /// The figures of `step` (the node's alone while it has no name yet) as of slurmd's
    /// last update. The node's parts are read where the step may need them: unless slurmd
    /// splits by shares, where a step's figure is its own account.
    pub(crate) fn read(&self, step: Option<StepKey>) -> Slot {
        let mut window = [0u8; PROBES * SLOT_SIZE];
        let mut block = [0u8; NODE_SIZE];
        for _ in 0..TRIES {
            let own = match step {
                None => None,
                Some(key) => {
                    let at = SLOTS_AT + home(key, self.capacity, self.seed) * SLOT_SIZE;
                    match self.read_at(&mut window, at) {
                        Some(()) => {}
                        None => return Slot::Gone,
                    }
                    match find(&window, key) {
                        Found::Whole(seq, update, account) => Some((seq, update, account)),
                        Found::Missing => return Slot::Missing,
                        Found::Torn => continue,
                    }
                }
            };
            if let Some((_, update, account)) = own
                && update.shares == Some(true)
            {
                return Slot::Found(answer(update, Vec::new(), Some(account)));
            }
            if self.read_at(&mut block, NODE_AT).is_none() {
                return Slot::Gone;
            }
            let Framed::Whole(seq) = unframe(&block) else {
                continue;
            };
            let (update, parts) = decode_node(&block);
            let Some(parts) = parts else {
                return Slot::Missing;
            };
            return match own {
                // the slot and the block of two updates: read again
                Some((own_seq, ..)) if own_seq != seq => continue,
                Some((_, _, account)) => Slot::Found(answer(update, parts, Some(account))),
                None => Slot::Found(answer(update, parts, None)),
            };
        }
        Slot::Torn
    }

    /// Fills `buf` from `at`; `None` when the file is shorter (slurmd replaced it).
    fn read_at(&self, buf: &mut [u8], at: usize) -> Option<()> {
        self.file.read_exact_at(buf, at as u64).ok()
    }
}

fn answer(update: Update, parts: Vec<Part>, step: Option<Account>) -> Answer {
    Answer {
        epoch: update.epoch,
        sampled_at: update.sampled_at,
        shares: update.shares,
        node: update.node,
        parts,
        step,
    }
}

enum Found {
    Whole(u64, Update, Account),
    Missing,
    Torn,
}

/// `key`'s slot in the probe `window`: probing ends at its key or an empty slot.
fn find(window: &[u8], key: StepKey) -> Found {
    let mut torn = false;
    for slot in window.chunks_exact(SLOT_SIZE) {
        match unframe(slot) {
            Framed::Empty => break,
            Framed::Torn => torn = true,
            Framed::Whole(seq) => {
                let (found, update, account) = decode_slot(slot);
                if found == key {
                    return Found::Whole(seq, update, account);
                }
            }
        }
    }
    if torn { Found::Torn } else { Found::Missing }
}

#[cfg(test)]
mod tests;
