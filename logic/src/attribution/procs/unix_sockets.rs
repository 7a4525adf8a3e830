//! Which unix sockets are bound to which files, asked of the kernel (`NETLINK_SOCK_DIAG`,
//! `AF_UNIX`): each socket's inode, the path it was bound at and the inode and device of
//! the file that bind made. Not read from `/proc/net/unix`: that table is text, one line a
//! socket, and a socket's path is its binder's to choose, newlines included, so any user's
//! socket could print a line of its own naming a spool socket's path and another inode.
//! The kernel's reply is binary, each field where the format puts it.
//!
//! The layouts are the kernel's uapi (`linux/netlink.h`, `linux/sock_diag.h`,
//! `linux/unix_diag.h`), in the host's byte order, built and read here byte by byte: a reply
//! that does not parse is an error, never a guess.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
    setsockopt, socket, sockopt,
};
use nix::sys::time::TimeVal;

/// `SOCK_DIAG_BY_FAMILY`: the request, and each socket of the reply.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 0x1;
/// `NLM_F_ROOT | NLM_F_MATCH`: every socket, in as many datagrams as it takes.
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `struct nlmsghdr`: len u32, type u16, flags u16, seq u32, pid u32.
const NLMSG_HDR: usize = 16;
/// `struct unix_diag_req`: family u8, protocol u8, pad u16, states u32, ino u32, show u32,
/// cookie [u32; 2].
const UNIX_DIAG_REQ: usize = 24;
/// `struct unix_diag_msg`: family u8, type u8, state u8, pad u8, ino u32, cookie [u32; 2];
/// attributes follow.
const UNIX_DIAG_MSG: usize = 16;
const UDIAG_SHOW_NAME: u32 = 0x1;
const UDIAG_SHOW_VFS: u32 = 0x2;
/// `struct rtattr`: len u16, type u16, then the payload.
const RTA_HDR: usize = 4;
/// The path the socket was bound at (`sun_path`, NUL-ended).
const UNIX_DIAG_NAME: u16 = 0;
/// `struct unix_diag_vfs`: the bound file's inode u32 and device u32 (the kernel's
/// `MAJOR << 20 | MINOR`).
const UNIX_DIAG_VFS: u16 = 1;
/// The kernel sends a dump's datagrams at up to 32 KiB.
const DATAGRAM: usize = 64 * 1024;
/// The kernel answers at once; a reply slower than this is a failure, not a wait.
const REPLY_WAIT: Duration = Duration::from_secs(1);

/// Why the kernel's table of unix sockets is not known.
#[derive(Debug, thiserror::Error)]
pub(super) enum SocketTableError {
    #[error("cannot ask the kernel which unix sockets are bound where (NETLINK_SOCK_DIAG): {0}")]
    Ask(#[from] Errno),
    #[error("the kernel's table of unix sockets (NETLINK_SOCK_DIAG) does not parse: {0}")]
    Malformed(&'static str),
}

/// A unix socket bound to a file, as the kernel shows it.
#[derive(Debug, Clone, PartialEq)]
struct Bound {
    /// The socket's inode, which `/proc/<pid>/fd/` links show as `socket:[<inode>]`.
    socket: u32,
    /// The path it was bound at, as its binder wrote it.
    path: PathBuf,
    /// The bound file: its inode and device (the kernel's encoding).
    file: (u32, u32),
}

/// The inodes of the unix sockets bound at each of `paths`, in this network namespace:
/// a socket whose path is the same (by components) and whose bound file is the file now at
/// that path. A path with no socket file, or none bound to it, has none.
pub(super) fn sockets_bound_at(
    paths: &[&Path],
) -> Result<HashMap<PathBuf, HashSet<u32>>, SocketTableError> {
    let files: Vec<(&Path, SocketFile)> = paths
        .iter()
        .filter_map(|path| Some((*path, socket_file(path)?)))
        .collect();
    if files.is_empty() {
        return Ok(HashMap::new());
    }
    let bound = bound_sockets()?;
    let mut mounts = MountDevices::default();
    let mut found: HashMap<PathBuf, HashSet<u32>> = HashMap::new();
    for (path, file) in &files {
        let bound_to = |device: u32| -> HashSet<u32> {
            bound
                .iter()
                .filter(|b| b.file == (file.inode, device) && b.path == *path)
                .map(|b| b.socket)
                .collect()
        };
        let mut sockets = bound_to(file.stat_device);
        // only where `stat`'s device is not the superblock's (btrfs, overlayfs): the
        // mount's, asked of the kernel for this file alone
        if sockets.is_empty()
            && let Some(device) = mounts.of(path).filter(|d| *d != file.stat_device)
        {
            sockets = bound_to(device);
        }
        if !sockets.is_empty() {
            found.insert(path.to_path_buf(), sockets);
        }
    }
    Ok(found)
}

/// A socket file as `stat` shows it. The kernel's table gives a bound file's inode and the
/// device of its file system's superblock (`s_dev`); `stat` gives the same device on ext4
/// or xfs, but btrfs gives each subvolume a device of its own (SLES's `/` and `/var` are
/// btrfs subvolumes), and overlayfs gives a file its upper layer's: there the superblock's
/// is read from the mount the file is on ([`MountDevices`]), this process's own view, where
/// a file of another mount namespace is on another mount.
#[derive(Debug)]
struct SocketFile {
    inode: u32,
    stat_device: u32,
}

/// The socket file at `path` (not followed if a link), in the kernel's encoding of a
/// bound file. The kernel's table keeps 32 bits of an inode: so is it compared.
fn socket_file(path: &Path) -> Option<SocketFile> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_socket() {
        return None;
    }
    Some(SocketFile {
        inode: low_32(meta.ino()),
        stat_device: kernel_device(meta.dev()),
    })
}

/// The kernel's `dev_t` (`MAJOR << 20 | MINOR`) of a device `stat` gives.
fn kernel_device(dev: u64) -> u32 {
    let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
    low_32((major << 20) | (minor & 0xf_ffff))
}

/// The superblock device of each mount, by the mount's id: read once per question, and
/// only where some socket file is asked about.
#[derive(Debug, Default)]
struct MountDevices {
    by_id: Option<HashMap<u64, u32>>,
}

impl MountDevices {
    /// The superblock device of the mount that `path` (not followed if a link) is on.
    fn of(&mut self, path: &Path) -> Option<u32> {
        // O_PATH opens a socket file (a plain open gives ENXIO) without reading it
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .ok()?;
        let fdinfo =
            fs::read_to_string(format!("/proc/thread-self/fdinfo/{}", file.as_raw_fd())).ok()?;
        let mount: u64 = fdinfo
            .lines()
            .find_map(|l| l.strip_prefix("mnt_id:"))?
            .trim()
            .parse()
            .ok()?;
        let by_id = self.by_id.get_or_insert_with(|| {
            fs::read_to_string("/proc/thread-self/mountinfo")
                .map(|text| parse_mountinfo(&text))
                .unwrap_or_default()
        });
        by_id.get(&mount).copied()
    }
}

/// Each mount's id and its superblock's device (`MAJOR:MINOR`, the third field of a
/// `mountinfo` line), in the kernel's encoding; a line that does not parse is left out.
fn parse_mountinfo(text: &str) -> HashMap<u64, u32> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let id = fields.next()?.parse().ok()?;
            let (major, minor) = fields.nth(1)?.split_once(':')?;
            let (major, minor): (u64, u64) = (major.parse().ok()?, minor.parse().ok()?);
            Some((id, kernel_device(nix::sys::stat::makedev(major, minor))))
        })
        .collect()
}

fn low_32(n: u64) -> u32 {
    u32::try_from(n & u64::from(u32::MAX)).unwrap_or(u32::MAX)
}

/// Every unix socket of this network namespace bound to a file, in one dump.
fn bound_sockets() -> Result<Vec<Bound>, SocketTableError> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    let wait = TimeVal::new(i64::try_from(REPLY_WAIT.as_secs()).unwrap_or(1), 0);
    setsockopt(&fd, sockopt::ReceiveTimeout, &wait)?;
    let seq = std::process::id();
    sendto(
        fd.as_raw_fd(),
        &request(seq),
        &NetlinkAddr::new(0, 0),
        MsgFlags::empty(),
    )?;
    let mut found = Vec::new();
    let mut buf = vec![0u8; DATAGRAM];
    loop {
        // MSG_TRUNC: the datagram's whole length, to tell a cut one
        let len = recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_TRUNC)?;
        let datagram = buf
            .get(..len)
            .ok_or(SocketTableError::Malformed("a datagram longer than 64 KiB"))?;
        if parse_datagram(datagram, seq, &mut found)? {
            return Ok(found);
        }
    }
}

/// A dump of every unix socket, with its path and bound file.
fn request(seq: u32) -> Vec<u8> {
    let mut req = Vec::with_capacity(NLMSG_HDR + UNIX_DIAG_REQ);
    let len = u32::try_from(NLMSG_HDR + UNIX_DIAG_REQ).unwrap_or(u32::MAX);
    req.extend(len.to_ne_bytes());
    req.extend(SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend((NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req.extend(seq.to_ne_bytes());
    req.extend(0u32.to_ne_bytes());
    let family = u8::try_from(libc::AF_UNIX).unwrap_or(1);
    req.extend([family, 0]);
    req.extend(0u16.to_ne_bytes());
    // every state: a listening slurmstepd's, and any other
    req.extend(u32::MAX.to_ne_bytes());
    req.extend(0u32.to_ne_bytes());
    req.extend((UDIAG_SHOW_NAME | UDIAG_SHOW_VFS).to_ne_bytes());
    req.extend([0u8; 8]);
    req
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

/// `NLMSG_ALIGN` and `RTA_ALIGN`: 4 bytes.
fn align(len: usize) -> usize {
    len.saturating_add(3) & !3
}

/// Adds the bound sockets of one datagram of the reply to `found`; whether it ends the
/// dump.
fn parse_datagram(
    mut data: &[u8],
    seq: u32,
    found: &mut Vec<Bound>,
) -> Result<bool, SocketTableError> {
    use SocketTableError::Malformed;
    while !data.is_empty() {
        let len = u32_at(data, 0).ok_or(Malformed("a message header cut short"))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let message = data
            .get(..len)
            .filter(|_| len >= NLMSG_HDR)
            .ok_or(Malformed("a message's length out of its datagram"))?;
        if u32_at(message, 8) != Some(seq) {
            return Err(Malformed("a message of another request"));
        }
        let body = &message[NLMSG_HDR..];
        match u16_at(message, 4) {
            Some(NLMSG_DONE) => return Ok(true),
            Some(NLMSG_ERROR) => {
                // the error's negative errno, then the request's header
                let code = u32_at(body, 0).ok_or(Malformed("an error cut short"))?;
                let errno = i32::from_ne_bytes(code.to_ne_bytes()).saturating_neg();
                return Err(match errno {
                    0 => Malformed("an acknowledgement instead of a table"),
                    _ => SocketTableError::Ask(Errno::from_raw(errno)),
                });
            }
            Some(SOCK_DIAG_BY_FAMILY) => found.extend(parse_socket(body)?),
            _ => return Err(Malformed("a message of an unknown type")),
        }
        data = data.get(align(len)..).unwrap_or_default();
    }
    Ok(false)
}

/// One socket of the reply (`unix_diag_msg` and its attributes): `None` if bound to no
/// file (unbound, or an abstract name).
fn parse_socket(body: &[u8]) -> Result<Option<Bound>, SocketTableError> {
    use SocketTableError::Malformed;
    let socket = u32_at(body, 4).ok_or(Malformed("a socket cut short"))?;
    let mut attributes = body.get(UNIX_DIAG_MSG..).unwrap_or_default();
    let (mut path, mut file) = (None, None);
    while !attributes.is_empty() {
        let len = u16_at(attributes, 0).ok_or(Malformed("an attribute cut short"))?;
        let len = usize::from(len);
        let attribute = attributes
            .get(..len)
            .filter(|_| len >= RTA_HDR)
            .ok_or(Malformed("an attribute's length out of its message"))?;
        let payload = &attribute[RTA_HDR..];
        match u16_at(attribute, 2) {
            Some(UNIX_DIAG_NAME) => {
                // sun_path up to its NUL; an abstract name starts with one
                let name = payload.split(|b| *b == 0).next().unwrap_or_default();
                path = (!name.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(name)));
            }
            Some(UNIX_DIAG_VFS) => {
                let ino = u32_at(payload, 0).ok_or(Malformed("a bound file cut short"))?;
                let dev = u32_at(payload, 4).ok_or(Malformed("a bound file cut short"))?;
                file = Some((ino, dev));
            }
            _ => {}
        }
        attributes = attributes.get(align(len)..).unwrap_or_default();
    }
    Ok(path
        .zip(file)
        .map(|(path, file)| Bound { socket, path, file }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::os::unix::net::UnixListener;

    /// The inode of the socket `listener`, as `/proc/<pid>/fd/` links name it.
    fn inode(listener: &UnixListener) -> u32 {
        low_32(nix::sys::stat::fstat(listener).expect("fstat").st_ino)
    }

    #[test]
    fn the_kernel_tells_which_socket_is_bound_at_a_path() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (a, b) = (tmp.path().join("n1_5.0"), tmp.path().join("n1_6.0"));
        let listener = UnixListener::bind(&a).expect("bind");
        let plain = tmp.path().join("file");
        fs::write(&plain, "").expect("file");
        let found =
            sockets_bound_at(&[&a, &b, &plain, &tmp.path().join("none")]).expect("sock_diag");
        let expected: HashMap<PathBuf, HashSet<u32>> =
            [(a.clone(), [inode(&listener)].into())].into();
        assert_eq!(found, expected);
        // by components: a spool dir written with a doubled or a trailing `/`
        let doubled = PathBuf::from(format!("{}//n1_5.0", tmp.path().display()));
        assert_eq!(
            sockets_bound_at(&[&doubled]).expect("sock_diag")[&doubled],
            [inode(&listener)].into()
        );
        // a socket file left by a socket now closed is bound by none
        drop(listener);
        assert!(sockets_bound_at(&[&a]).expect("sock_diag").is_empty());
    }

    /// A socket bound at the same path elsewhere (another mount namespace shows another
    /// file there) is not the one at this path: the bound file must be this file.
    #[test]
    fn a_socket_of_the_same_path_bound_to_another_file_is_not_it() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("n1_5.0");
        let first = UnixListener::bind(&path).expect("bind");
        // the path now names another socket's file; `first` still shows the same path
        fs::remove_file(&path).expect("rm");
        let second = UnixListener::bind(&path).expect("bind");
        let found = sockets_bound_at(&[&path]).expect("sock_diag");
        assert_eq!(found[&path], [inode(&second)].into());
        assert_ne!(inode(&first), inode(&second));
    }

    /// Runs `program` with `args`, in this test thread's mount namespace.
    fn run(program: &str, args: &[&str]) {
        let status = std::process::Command::new(program)
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(status.success(), "{program} {args:?}: {status}");
    }

    /// A spool dir on btrfs (SLES's `/`, a subvolume) or overlayfs: `stat` gives a device
    /// other than the one the kernel's socket table gives, and the socket is found all the
    /// same. In a mount namespace of this test's thread (needs root, `btrfs-progs`).
    #[test]
    fn a_socket_on_btrfs_or_overlayfs_is_found() {
        if !crate::test_support::root_or_skip("mounting file systems") {
            return;
        }
        // only this thread's mounts change, and they go with it
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare");
        run("mount", &["--make-rprivate", "/"]);
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = |name: &str| {
            let d = tmp.path().join(name);
            fs::create_dir_all(&d).expect("mkdir");
            d
        };
        let text = |p: &Path| p.to_str().expect("utf-8").to_string();
        let found_at = |spool: &Path, name: &str| {
            let path = spool.join(name);
            let listener = UnixListener::bind(&path).expect("bind");
            let file = socket_file(&path).expect("a socket");
            let mount_device = MountDevices::default().of(&path);
            let found = sockets_bound_at(&[&path]).expect("sock_diag");
            assert_eq!(
                found.get(&path),
                Some(&[inode(&listener)].into()),
                "{} ({file:?}, its mount's device {mount_device:?})",
                path.display()
            );
            (file.stat_device, mount_device)
        };

        let image = tmp.path().join("btrfs.img");
        fs::File::create(&image)
            .and_then(|f| f.set_len(256 << 20))
            .expect("image");
        run("mkfs.btrfs", &["-q", &text(&image)]);
        let btrfs = dir("btrfs");
        run("mount", &["-o", "loop", &text(&image), &text(&btrfs)]);
        let subvolume = btrfs.join("slurmd");
        run("btrfs", &["-q", "subvolume", "create", &text(&subvolume)]);
        found_at(&btrfs, "n1_5.0");
        let on_subvolume = found_at(&subvolume, "n1_6.0");
        // what made the match fail before: a subvolume's `stat` device is its own
        assert_ne!(Some(on_subvolume.0), on_subvolume.1);

        let layers = dir("layers");
        run("mount", &["-t", "tmpfs", "tmpfs", &text(&layers)]);
        let layer = |name: &str| {
            let d = layers.join(name);
            fs::create_dir(&d).expect("mkdir");
            text(&d)
        };
        // the lower layer on another file system than the upper (an image's layers and a
        // writable tmpfs): `stat` then gives a file the upper layer's device
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            text(&dir("lower")),
            layer("upper"),
            layer("work")
        );
        let merged = dir("merged");
        run(
            "mount",
            &["-t", "overlay", "overlay", "-o", &options, &text(&merged)],
        );
        let on_overlay = found_at(&merged, "n1_7.0");
        assert_ne!(Some(on_overlay.0), on_overlay.1);
        for mounted in [&merged, &layers, &btrfs] {
            run("umount", &[&text(mounted)]);
        }
    }

    fn message(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut m = Vec::new();
        let len = u32::try_from(NLMSG_HDR + body.len()).expect("len");
        m.extend(len.to_ne_bytes());
        m.extend(kind.to_ne_bytes());
        m.extend(0u16.to_ne_bytes());
        m.extend(seq.to_ne_bytes());
        m.extend(0u32.to_ne_bytes());
        m.extend(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn attribute(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend(
            u16::try_from(RTA_HDR + payload.len())
                .expect("len")
                .to_ne_bytes(),
        );
        a.extend(kind.to_ne_bytes());
        a.extend(payload);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    /// A reply of one socket bound at `/s/n1_5.0` to file 77 of device 9, and its end.
    fn reply(seq: u32) -> Vec<u8> {
        let mut body = vec![1, 1, 10, 0];
        body.extend(4321u32.to_ne_bytes());
        body.extend([0u8; 8]);
        body.extend(attribute(UNIX_DIAG_NAME, b"/s/n1_5.0\0"));
        let mut vfs = 77u32.to_ne_bytes().to_vec();
        vfs.extend(9u32.to_ne_bytes());
        body.extend(attribute(UNIX_DIAG_VFS, &vfs));
        let mut r = message(SOCK_DIAG_BY_FAMILY, seq, &body);
        r.extend(message(NLMSG_DONE, seq, &0i32.to_ne_bytes()));
        r
    }

    #[test]
    fn a_reply_is_read_field_by_field() {
        let mut found = Vec::new();
        assert!(parse_datagram(&reply(5), 5, &mut found).expect("parses"));
        assert_eq!(
            found,
            vec![Bound {
                socket: 4321,
                path: PathBuf::from("/s/n1_5.0"),
                file: (77, 9)
            }]
        );
        let error = message(NLMSG_ERROR, 5, &(-13i32).to_ne_bytes());
        assert!(matches!(
            parse_datagram(&error, 5, &mut Vec::new()),
            Err(SocketTableError::Ask(Errno::EACCES))
        ));
        assert!(parse_datagram(&reply(6), 5, &mut Vec::new()).is_err());
    }

    proptest! {
        /// A reply cut anywhere, or bytes of it changed, is an error or a table: never a
        /// panic.
        #[test]
        fn a_malformed_reply_never_panics(
            cut in 0usize..120,
            at in 0usize..120,
            byte in any::<u8>(),
            garbage in prop::collection::vec(any::<u8>(), 0..200),
        ) {
            let full = reply(5);
            let _ = parse_datagram(&full[..cut.min(full.len())], 5, &mut Vec::new());
            let mut changed = full.clone();
            if let Some(b) = changed.get_mut(at) {
                *b = byte;
            }
            let _ = parse_datagram(&changed, 5, &mut Vec::new());
            let _ = parse_datagram(&garbage, 5, &mut Vec::new());
        }
    }
}
