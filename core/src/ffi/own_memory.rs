//! Reading this process's own memory at addresses nothing vouches for: Slurm's internal
//! records, whose layout this build may have wrong.
//!
//! Every read goes through `process_vm_readv(2)` on the own pid, which the kernel answers
//! with `EFAULT` where a dereference would raise SIGSEGV and take slurmstepd down. Strings
//! are read up to a bound, so a pointer into memory with no NUL ends too.

use std::fmt;
use std::io::IoSliceMut;

use nix::errno::Errno;
use nix::sys::uio::{RemoteIoVec, process_vm_readv};
use nix::unistd::getpid;

/// A read stays within one page at a time: a string that ends just before an unmapped
/// page is read whole. 4 KiB divides every page size Linux uses.
const PAGE: usize = 4096;

/// What could not be read, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// What the memory was to hold (`"the step record"`, `"its user_name"`).
    pub what: &'static str,
    pub address: usize,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// A NULL pointer.
    Null,
    /// The kernel refused the read (`EFAULT`: not mapped, or not readable).
    Refused(Errno),
    /// No NUL within this many bytes.
    Unterminated(usize),
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (what, at) = (self.what, self.address);
        match self.why {
            Why::Null => write!(f, "{what} is a NULL pointer"),
            Why::Refused(e) => write!(f, "{what} at {at:#x} cannot be read ({e})"),
            Why::Unterminated(n) => write!(f, "{what} at {at:#x} has no end in {n} bytes"),
        }
    }
}

/// Fills `buf` from `address` of this process, or says why it cannot.
pub fn read(what: &'static str, address: usize, buf: &mut [u8]) -> Result<(), Unreadable> {
    let fail = |why| Unreadable { what, address, why };
    if address == 0 {
        return Err(fail(Why::Null));
    }
    let mut done = 0;
    while done < buf.len() {
        let from = address
            .checked_add(done)
            .ok_or(fail(Why::Refused(Errno::EFAULT)))?;
        let rest = &mut buf[done..];
        let len = rest.len();
        let remote = [RemoteIoVec { base: from, len }];
        match process_vm_readv(getpid(), &mut [IoSliceMut::new(rest)], &remote) {
            Ok(0) => return Err(fail(Why::Refused(Errno::EFAULT))),
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(fail(Why::Refused(e))),
        }
    }
    Ok(())
}

/// `N` bytes at `address`.
pub fn bytes<const N: usize>(what: &'static str, address: usize) -> Result<[u8; N], Unreadable> {
    let mut buf = [0; N];
    read(what, address, &mut buf)?;
    Ok(buf)
}

pub fn u32_at(what: &'static str, address: usize) -> Result<u32, Unreadable> {
    bytes(what, address).map(u32::from_ne_bytes)
}

pub fn u64_at(what: &'static str, address: usize) -> Result<u64, Unreadable> {
    bytes(what, address).map(u64::from_ne_bytes)
}

pub fn i64_at(what: &'static str, address: usize) -> Result<i64, Unreadable> {
    bytes(what, address).map(i64::from_ne_bytes)
}

/// A pointer stored at `address`, as an address.
pub fn pointer_at(what: &'static str, address: usize) -> Result<usize, Unreadable> {
    bytes(what, address).map(usize::from_ne_bytes)
}

/// The NUL-terminated string at `address`, of at most `max` bytes before its NUL.
pub fn c_string(what: &'static str, address: usize, max: usize) -> Result<Vec<u8>, Unreadable> {
    let mut out = Vec::new();
    let mut at = address;
    while out.len() <= max {
        // up to the end of this page, and no further than one byte past the bound
        let room = (PAGE - at % PAGE).min(max + 1 - out.len());
        let mut chunk = vec![0; room];
        read(what, at, &mut chunk).map_err(|e| Unreadable { address, ..e })?;
        if let Some(end) = chunk.iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk);
        at += room;
    }
    Err(Unreadable {
        what,
        address,
        why: Why::Unterminated(max),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address that is never mapped: the first page, which Linux keeps unmapped
    /// (`vm.mmap_min_addr`), past NULL.
    const UNMAPPED: usize = 0x100;

    #[test]
    fn memory_read_is_what_is_there() {
        let value: u64 = 0x0123_4567_89ab_cdef;
        let at = &raw const value as usize;
        assert_eq!(u64_at("a value", at), Ok(value));
        assert_eq!(u32_at("a value", at), Ok(0x89ab_cdef));
        let text = c"root";
        assert_eq!(
            c_string("a name", text.as_ptr() as usize, 64),
            Ok(b"root".to_vec())
        );
    }

    /// A bad pointer is an error naming what and where, not a SIGSEGV; NULL is its own.
    #[test]
    fn a_bad_pointer_is_an_error_not_a_crash() {
        let refused = Unreadable {
            what: "a name",
            address: UNMAPPED,
            why: Why::Refused(Errno::EFAULT),
        };
        assert_eq!(u64_at("a name", UNMAPPED), Err(refused.clone()));
        assert_eq!(c_string("a name", UNMAPPED, 64), Err(refused));
        assert_eq!(u32_at("x", 0).map_err(|e| e.why), Err(Why::Null));
        assert_eq!(
            u64_at("x", usize::MAX - 3).map_err(|e| e.why),
            Err(Why::Refused(Errno::EFAULT))
        );
    }

    /// A string with no NUL within its bound stops at the bound; one that runs into an
    /// unmapped page is refused where it ends; one that ends just before it is whole.
    #[test]
    fn strings_are_read_within_their_bound_and_their_mapping() {
        let long = [b'a'; 100];
        let at = long.as_ptr() as usize;
        assert_eq!(
            c_string("a name", at, 10).map_err(|e| e.why),
            Err(Why::Unterminated(10))
        );
        // two pages, the second made unreadable
        let len = 2 * PAGE;
        let map = guarded_pages(len);
        let page = map.as_ptr() as usize;
        let end = page + PAGE;
        let tail = end - 4;
        map.write(tail - page, b"abc\0");
        assert_eq!(c_string("a name", tail, 64), Ok(b"abc".to_vec()));
        map.write(tail - page, b"abcd");
        assert_eq!(
            c_string("a name", tail, 64).map_err(|e| e.why),
            Err(Why::Refused(Errno::EFAULT))
        );
    }

    /// Two pages of anonymous memory, the second with no access, unmapped when dropped.
    struct Map(std::ptr::NonNull<core::ffi::c_void>, usize);

    impl Map {
        fn as_ptr(&self) -> *const u8 {
            self.0.as_ptr().cast()
        }
        fn write(&self, offset: usize, data: &[u8]) {
            assert!(offset + data.len() <= PAGE);
            // SAFETY: within the first page, mapped read-write and owned by this Map.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr(),
                    self.0.as_ptr().cast::<u8>().add(offset),
                    data.len(),
                )
            };
        }
    }

    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: the mapping this Map made, of this length.
            unsafe { nix::sys::mman::munmap(self.0, self.1) }.expect("munmap");
        }
    }

    fn guarded_pages(len: usize) -> Map {
        use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous, mprotect};
        let size = std::num::NonZeroUsize::new(len).expect("size");
        // SAFETY: a fresh anonymous mapping; nothing else refers to it.
        let map = unsafe {
            mmap_anonymous(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE,
            )
        }
        .expect("mmap");
        // SAFETY: the second page of that mapping, within it.
        let second = unsafe { map.byte_add(PAGE) };
        // SAFETY: that page, which no Rust reference points into.
        unsafe { mprotect(second, PAGE, ProtFlags::PROT_NONE) }.expect("mprotect");
        Map(map, len)
    }
}
