//! The .deb that ci/package.sh made (ci/test.sh passes its path in ENERGY_TEST_DEB),
//! installed with `dpkg -i` into the plugin directory of the Slurm under test (inside a
//! private mount namespace over overlays: the machine is left as it was), measures a job
//! in a cluster whose daemons load only the installed plugin; its preinst, and ci/install.sh
//! as root runs it under sudo (no cargo), install nothing into a Slurm of another release
//! than the plugins' (stand-in Slurms in temporary directories).

use energy_tests as support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use support::cluster::{Cluster, ClusterSpec, energy_of, mark, phase_commands};
use support::*;

/// The .deb of ci/package.sh (ENERGY_TEST_DEB), or `None` where ENERGY_TESTS_ALLOW_SKIP=1
/// lets `test` skip without it.
fn deb_or_skip(test: &str) -> Option<PathBuf> {
    match std::env::var_os("ENERGY_TEST_DEB") {
        Some(deb) if !deb.is_empty() => Some(PathBuf::from(deb)),
        _ if std::env::var("ENERGY_TESTS_ALLOW_SKIP").as_deref() == Ok("1") => {
            eprintln!("SKIPPED {test}: ENERGY_TEST_DEB unset");
            None
        }
        _ => panic!(
            "ENERGY_TEST_DEB must name the .deb of ci/package.sh (ci/test.sh sets it), \
             or set ENERGY_TESTS_ALLOW_SKIP=1 to skip"
        ),
    }
}

#[test]
fn the_installed_package_measures_a_job() {
    if !root_or_skip("the_installed_package_measures_a_job") {
        return;
    }
    let Some(deb) = deb_or_skip("the_installed_package_measures_a_job") else {
        return;
    };
    // The daemons' PluginDir is Slurm's alone: the plugin they load there can only be the
    // package's, which exists inside their namespace and nowhere else.
    let installed = slurm_plugin_dir().join("acct_gather_energy_rust_rapl.so");
    assert!(
        !installed.exists(),
        "{} exists outside the test: remove it, the test must load the package's",
        installed.display()
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::up(
        tmp.path(),
        &ClusterSpec {
            energy_type: "acct_gather_energy/rust_rapl",
            acct_gather: "EnergyRaplSource=msr\n",
            sim_args: vec![Some("--vendor amd --packages 2 --cpus 2 --esu 20")],
            package: Some(&deb),
            ..ClusterSpec::default()
        },
    );
    let sim = cluster.sim(1);
    let script = format!(
        "#!/bin/sh\nsrun -n1 sh -c '{}'\n",
        phase_commands(sim, "s0", &[("package0=200 package1=150", 12)])
    );
    let job = cluster.sbatch(&script);
    cluster.wait_job(job, Duration::from_secs(120));
    let rows = cluster.energy(job);
    let truth =
        mark(sim, "s0_end").expect("mark s0_end") - mark(sim, "s0_start").expect("s0_start");
    assert_close(
        &format!("{job}.0"),
        energy_of(&rows, &format!("{job}.0")),
        truth,
        0.01,
    );
    assert!(
        !installed.exists(),
        "the install leaked out of the test's mount namespace"
    );
}

/// The release of a `SLURM_VERSION_NUMBER`, as Slurm writes it.
fn release(number: u32) -> String {
    format!(
        "{}.{:02}.{}",
        number >> 16,
        (number >> 8) & 0xff,
        number & 0xff
    )
}

/// The release the plugins here were built for (the headers of this build's slurm-sys).
fn built_release() -> String {
    release(slurm_sys::SLURM_VERSION_NUMBER)
}

/// A release other than the built one: the 24.11.5, unless that is what was built.
fn other_release() -> &'static str {
    if built_release() == "24.11.5" {
        "22.05.8"
    } else {
        "24.11.5"
    }
}

/// A Slurm whose plugin directory is `plugin_dir`, of which the installers see only what
/// they ask: `libslurmfull.so` there (an empty stand-in: it marks the directory as a Slurm's
/// plugin directory) and, as `--prefix` lays it out, `../../sbin/slurmd`: a script
/// answering `-V` as slurmd does (`slurm 24.11.5`). Returns `plugin_dir`.
fn slurm_at(plugin_dir: PathBuf, slurmd_release: Option<&str>) -> PathBuf {
    fs::create_dir_all(&plugin_dir).expect("mkdir the plugin directory");
    fs::write(plugin_dir.join("libslurmfull.so"), "").expect("libslurmfull.so");
    if let Some(release) = slurmd_release {
        let sbin = plugin_dir.join("../../sbin");
        fs::create_dir_all(&sbin).expect("mkdir sbin");
        let slurmd = sbin.join("slurmd");
        fs::write(
            &slurmd,
            format!("#!/bin/sh\n[ \"$1\" = -V ] && echo 'slurm {release}'\n"),
        )
        .expect("slurmd");
        fs::set_permissions(&slurmd, fs::Permissions::from_mode(0o755)).expect("chmod slurmd");
    }
    plugin_dir
}

/// The files in `dir`, by name, sorted.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `dir`, made a directory of links to `tools` (found in the system's directories) and
/// nothing else: the PATH of a host that has only those. Returns `dir`.
fn tool_path(dir: &Path, tools: &[&str]) -> PathBuf {
    fs::create_dir_all(dir).expect("mkdir the PATH directory");
    for tool in tools.iter().filter(|t| !dir.join(t).exists()) {
        let found = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} is in no system directory"));
        std::os::unix::fs::symlink(found, dir.join(tool)).expect("link a tool");
    }
    dir.to_path_buf()
}

/// `ci/install.sh PLUGIN_DIR` as root runs it under sudo: no cargo on its PATH (a directory
/// of links to the few tools it uses) and the plugins a user built in `CARGO_TARGET_DIR`
/// (this build's, copied into `tmp/target/release`), with the headers they were built from
/// (a `slurm_version.h` of the built release) and BINDIR `tmp/bin`.
fn install_sh_under_sudo(tmp: &Path, plugin_dir: &Path, expected: Option<&str>) -> Output {
    let release_dir = tmp.join("target/release");
    fs::create_dir_all(&release_dir).expect("mkdir target/release");
    for (name, built) in built_plugins() {
        fs::copy(&built, release_dir.join(format!("lib{name}.so"))).expect("copy plugin");
    }
    let sampler = "acct_gather_energy_rust_variorum_sampler";
    fs::copy(target_dir().join(sampler), release_dir.join(sampler)).expect("copy sampler");
    let headers = tmp.join("include/slurm");
    fs::create_dir_all(&headers).expect("mkdir include/slurm");
    fs::write(
        headers.join("slurm_version.h"),
        format!(
            "#define SLURM_VERSION_NUMBER 0x{:06x}\n",
            slurm_sys::SLURM_VERSION_NUMBER
        ),
    )
    .expect("slurm_version.h");
    // no readelf: the plugins' release is read with sh and od (awk reads the headers)
    let path = tool_path(
        &tmp.join("path"),
        &[
            "sh", "awk", "od", "tr", "sed", "install", "mkdir", "basename", "dirname", "ls",
            "expr", "cat",
        ],
    );
    let mut command = Command::new("/bin/sh");
    command
        .arg(workspace().join("ci/install.sh"))
        .arg(plugin_dir)
        .env_clear()
        .env("PATH", &path)
        .env("CARGO_TARGET_DIR", tmp.join("target"))
        .env("SLURM_INCLUDE_DIR", tmp.join("include"))
        .env("BINDIR", tmp.join("bin"));
    if let Some(expected) = expected {
        command.env("SLURM_EXPECTED_VERSION", expected);
    }
    command.output().expect("run ci/install.sh")
}

/// Asserts that install.sh refused, wrote nothing (the plugin directory holds what it held,
/// no BINDIR), and said `says`.
fn assert_refused(out: &Output, tmp: &Path, plugin_dir: &Path, held: &[&str], says: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "install.sh: {stderr}");
    assert_eq!(
        files_in(plugin_dir),
        held,
        "install.sh wrote into the plugin directory"
    );
    assert!(!tmp.join("bin").exists(), "install.sh made BINDIR");
    for text in says {
        assert!(stderr.contains(text), "{text:?} not in: {stderr}");
    }
    assert!(stderr.contains("nothing installed"), "{stderr}");
}

/// Asserts that install.sh installed every plugin and the sampler into `plugin_dir`.
fn assert_installed(out: &Output, plugin_dir: &Path) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "install.sh: {stderr}");
    let files = files_in(plugin_dir);
    for (name, _) in built_plugins() {
        assert!(
            files.contains(&format!("{name}.so")),
            "{name}.so not in {files:?}"
        );
    }
    assert!(files.contains(&"acct_gather_energy_rust_variorum_sampler".to_string()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("built for Slurm {}", built_release())),
        "{stdout}"
    );
}

#[test]
fn install_sh_under_sudo_refuses_plugins_built_for_another_slurm() {
    // the case: a 22.05.8 build, root without cargo, the plugin directory of a
    // 24.11.5 Slurm (whose slurmd says so), headers of the build's own release
    let tmp = tempfile::tempdir().expect("tempdir");
    let other = other_release();
    let plugin_dir = slurm_at(tmp.path().join("slurm/lib/slurm"), Some(other));
    let out = install_sh_under_sudo(tmp.path(), &plugin_dir, None);
    assert_refused(
        &out,
        tmp.path(),
        &plugin_dir,
        &["libslurmfull.so"],
        &[
            &format!("built for Slurm {}", built_release()),
            &format!("{} is Slurm {other}'s", plugin_dir.display()),
            "sbin/slurmd -V",
            &format!("build them for {other}"),
        ],
    );
    // and SLURM_EXPECTED_VERSION, naming that Slurm's release, does not talk it round
    let out = install_sh_under_sudo(tmp.path(), &plugin_dir, Some(other));
    assert_refused(
        &out,
        tmp.path(),
        &plugin_dir,
        &["libslurmfull.so"],
        &[&format!("build them for {other}")],
    );
}

#[test]
fn install_sh_refuses_plugins_of_another_release_than_slurm_expected_version() {
    // the plugin directory's Slurm is the build's, SLURM_EXPECTED_VERSION another
    let tmp = tempfile::tempdir().expect("tempdir");
    let plugin_dir = slurm_at(tmp.path().join("slurm/lib/slurm"), Some(&built_release()));
    let other = other_release();
    let out = install_sh_under_sudo(tmp.path(), &plugin_dir, Some(other));
    assert_refused(
        &out,
        tmp.path(),
        &plugin_dir,
        &["libslurmfull.so"],
        &[
            &format!("built for Slurm {}", built_release()),
            &format!("SLURM_EXPECTED_VERSION={other}"),
            &format!("build them for {other}"),
        ],
    );
}

#[test]
fn install_sh_installs_into_the_slurm_of_the_built_release() {
    // told by slurmd beside the directory
    let tmp = tempfile::tempdir().expect("tempdir");
    let plugin_dir = slurm_at(tmp.path().join("slurm/lib/slurm"), Some(&built_release()));
    let out = install_sh_under_sudo(tmp.path(), &plugin_dir, Some(&built_release()));
    assert_installed(&out, &plugin_dir);

    // told by a plugin that Slurm installed there (a built plugin stands in: it carries the
    // built release), no slurmd
    let tmp = tempfile::tempdir().expect("tempdir");
    let plugin_dir = slurm_at(tmp.path().join("slurm/lib/slurm"), None);
    let (_, plugin) = built_plugins().into_iter().next().expect("a plugin");
    fs::copy(plugin, plugin_dir.join("proctrack_pgid.so")).expect("stand-in Slurm plugin");
    let out = install_sh_under_sudo(tmp.path(), &plugin_dir, None);
    assert_installed(&out, &plugin_dir);
}

#[test]
fn install_sh_needs_slurm_expected_version_for_a_directory_of_no_slurm() {
    // a directory of one's own (no libslurmfull.so): only slurm.conf knows which Slurm
    // loads from it
    let tmp = tempfile::tempdir().expect("tempdir");
    let plugin_dir = tmp.path().join("mine");
    fs::create_dir_all(&plugin_dir).expect("mkdir");
    let out = install_sh_under_sudo(tmp.path(), &plugin_dir, None);
    assert_refused(
        &out,
        tmp.path(),
        &plugin_dir,
        &[],
        &["cannot tell which Slurm release", "SLURM_EXPECTED_VERSION"],
    );
    let out = install_sh_under_sudo(tmp.path(), &plugin_dir, Some(&built_release()));
    assert_installed(&out, &plugin_dir);
}

/// The directory the package installs its plugins into (`usr/lib/<multiarch>/slurm-wlm`
/// for Debian's Slurm), relative to `/`: what its preinst asks under DPKG_ROOT (dpkg --root).
fn deb_plugin_dir(deb: &Path) -> PathBuf {
    let listing = Command::new("dpkg-deb")
        .arg("-c")
        .arg(deb)
        .output()
        .expect("run dpkg-deb -c");
    let listing = String::from_utf8_lossy(&listing.stdout);
    let plugin = listing
        .split_whitespace()
        .find(|f| f.ends_with("/acct_gather_energy_rust_rapl.so"))
        .unwrap_or_else(|| panic!("no rust_rapl plugin in {}: {listing}", deb.display()));
    Path::new(plugin.trim_start_matches('.'))
        .parent()
        .expect("a directory")
        .strip_prefix("/")
        .expect("an absolute path")
        .to_path_buf()
}

#[test]
fn the_packages_preinst_refuses_a_slurm_of_another_release() {
    let Some(deb) = deb_or_skip("the_packages_preinst_refuses_a_slurm_of_another_release") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let control = tmp.path().join("control");
    let extracted = Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(&control)
        .status()
        .expect("run dpkg-deb -e");
    assert!(extracted.success(), "dpkg-deb -e {}", deb.display());
    let plugin_dir = deb_plugin_dir(&deb);
    let plugin_dir = plugin_dir.as_path();
    let preinst = |root: &Path| {
        Command::new("/bin/sh")
            .arg(control.join("preinst"))
            .arg("install")
            .env("DPKG_ROOT", root)
            .env_remove("SLURM_EXPECTED_VERSION")
            .output()
            .expect("run the preinst")
    };

    let other = other_release();
    let root = tmp.path().join("other");
    let dir = slurm_at(root.join(plugin_dir), Some(other));
    let out = preinst(&root);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "preinst: {stderr}");
    for text in [
        format!("built for Slurm {}", built_release()),
        format!("{} is Slurm {other}'s", dir.display()),
        format!("build them for {other}"),
        "nothing installed".to_string(),
    ] {
        assert!(stderr.contains(&text), "{text:?} not in: {stderr}");
    }

    let root = tmp.path().join("same");
    slurm_at(root.join(plugin_dir), Some(&built_release()));
    let out = preinst(&root);
    assert_eq!(
        out.status.code(),
        Some(0),
        "preinst: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `package` at `version` as equivs builds it in `dir`: no files and no scripts, only what
/// dpkg weighs in a dependency (the name and the version), as a rebuilt or updated package
/// of that name presents them.
fn equivs_package(dir: &Path, package: &str, version: &str) -> std::process::Child {
    fs::create_dir_all(dir).expect("mkdir the equivs directory");
    let control = dir.join("control");
    fs::write(
        &control,
        format!(
            "Section: admin\nPriority: optional\nStandards-Version: 3.9.2\n\
             Package: {package}\nVersion: {version}\n\
             Description: stand-in for {package} {version}\n stand-in\n"
        ),
    )
    .expect("the equivs control file");
    Command::new("equivs-build")
        .arg(&control)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run equivs-build (apt install equivs: ci/deps.sh)")
}

/// `dpkg --root=ROOT`: the database, files and log of ROOT alone, the maintainer scripts
/// run unchrooted with DPKG_ROOT=ROOT (as the package's preinst expects).
fn dpkg_in(root: &Path) -> Command {
    let mut dpkg = Command::new("dpkg");
    dpkg.arg(format!("--root={}", root.display()))
        .arg(format!("--log={}", root.join("dpkg.log").display()))
        .arg("--force-script-chrootless")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env_remove("SLURM_EXPECTED_VERSION");
    dpkg
}

/// One field of an installed package on this machine (`dpkg-query -W`), read only.
fn host_package_field(package: &str, field: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .arg("-W")
        .arg(format!("-f=${{{field}}}"))
        .arg(package)
        .output()
        .expect("run dpkg-query");
    let value = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !value.is_empty()).then_some(value)
}

#[test]
fn the_package_installs_beside_any_revision_of_its_slurm_release_and_no_other() {
    let test = "the_package_installs_beside_any_revision_of_its_slurm_release_and_no_other";
    if !root_or_skip(test) {
        return;
    }
    let Some(deb) = deb_or_skip(test) else {
        return;
    };
    let field = |name: &str| {
        let out = Command::new("dpkg-deb")
            .arg("-f")
            .arg(&deb)
            .arg(name)
            .output()
            .expect("run dpkg-deb -f");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let depends = field("Depends");
    let plugin_dir = deb_plugin_dir(&deb);
    // the package that owns the plugin directory on this machine (Debian's
    // slurm-wlm-basic-plugins), or none for a Slurm installed from source
    let owned = Command::new("dpkg-query")
        .arg("-S")
        .arg(Path::new("/").join(&plugin_dir).join("libslurmfull.so"))
        .output()
        .expect("run dpkg-query -S");
    let owner = String::from_utf8_lossy(&owned.stdout)
        .split(':')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if !owned.status.success() || owner.is_empty() {
        assert!(
            !depends.split(',').any(|d| d.trim().starts_with("slurm")),
            "no package owns /{} here, yet the package depends on one: {depends}",
            plugin_dir.display()
        );
        eprintln!("SKIPPED {test}: no package owns /{}", plugin_dir.display());
        return;
    }
    let owner_version = host_package_field(&owner, "Version").expect("the owner's version");
    // [epoch:]X.Y.Z[+repack][-revision]
    let (epoch, rest) = match owner_version.split_once(':') {
        Some((e, r)) => (format!("{e}:"), r.to_string()),
        None => (String::new(), owner_version.clone()),
    };
    let xyz: Vec<u32> = rest
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|n| n.parse().expect("X.Y.Z"))
        .collect();
    let (x, y, z) = (xyz[0], xyz[1], xyz[2]);
    assert_eq!(
        format!("{x}.{y:02}.{z}"),
        built_release(),
        "{owner} {owner_version}"
    );
    let same = |suffix: &str| format!("{epoch}{x}.{y:02}.{z}{suffix}");
    let micro = |z: u32, suffix: &str| format!("{epoch}{x}.{y:02}.{z}{suffix}");
    // a security update of the same release, a repacked one; the next release, its
    // release candidate, and the previous one
    let mut cases = vec![
        (same("-4+deb12u9"), true),
        (same("+dfsg-1"), true),
        (micro(z + 1, "-1"), false),
        (micro(z + 1, "~rc1-1"), false),
    ];
    if z > 0 {
        cases.push((micro(z - 1, "-4+deb12u9"), false));
    }

    let tmp = tempfile::tempdir().expect("tempdir");
    let builds: Vec<_> = cases
        .iter()
        .enumerate()
        .map(|(i, (version, _))| {
            let dir = tmp.path().join(format!("equivs{i}"));
            (dir.clone(), equivs_package(&dir, &owner, version))
        })
        .collect();
    // the package's other dependencies (libc6, ...) as this machine has them installed
    let others: String = depends
        .split(',')
        .map(|d| {
            d.split(['(', '|'])
                .next()
                .unwrap_or("")
                .trim()
                .split(':')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .filter(|name| !name.is_empty() && *name != owner)
        .map(|name| {
            let out = Command::new("dpkg-query")
                .arg("-s")
                .arg(&name)
                .output()
                .expect("run dpkg-query -s");
            assert!(
                out.status.success(),
                "{name}, which the package needs, is not installed here"
            );
            format!("{}\n", String::from_utf8_lossy(&out.stdout).trim_end())
        })
        .collect::<Vec<_>>()
        .join("\n");

    for ((version, admitted), (dir, build)) in cases.iter().zip(builds) {
        let built = build.wait_with_output().expect("equivs-build");
        assert!(
            built.status.success(),
            "equivs-build {owner} {version}: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        let standin = fs::read_dir(&dir)
            .expect("the equivs directory")
            .map(|e| e.expect("entry").path())
            .find(|p| p.extension().is_some_and(|e| e == "deb"))
            .expect("equivs built a .deb");
        // a private root: dpkg's database holds the other dependencies and the stand-in,
        // and the plugin directory a Slurm of the plugins' release (for the preinst)
        let root = dir.join("root");
        let admin = root.join("var/lib/dpkg");
        for sub in ["info", "updates", "triggers"] {
            fs::create_dir_all(admin.join(sub)).expect("mkdir the dpkg database");
        }
        fs::write(admin.join("status"), &others).expect("the dpkg status");
        slurm_at(root.join(&plugin_dir), Some(&built_release()));
        let out = dpkg_in(&root)
            .arg("-i")
            .arg(&standin)
            .output()
            .expect("dpkg -i");
        assert!(
            out.status.success(),
            "dpkg -i {}: {}",
            standin.display(),
            String::from_utf8_lossy(&out.stderr)
        );

        let out = dpkg_in(&root)
            .arg("-i")
            .arg(&deb)
            .output()
            .expect("dpkg -i");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let status = Command::new("dpkg-query")
            .arg(format!("--root={}", root.display()))
            .arg("-W")
            .arg("-f=${db:Status-Abbrev}")
            .arg(field("Package"))
            .output()
            .expect("dpkg-query --root");
        let status = String::from_utf8_lossy(&status.stdout).trim().to_string();
        if *admitted {
            assert!(
                out.status.success(),
                "Depends: {depends}; {owner} {version} refused: {stderr}"
            );
            assert_eq!(status, "ii", "beside {owner} {version}");
            assert!(
                root.join(&plugin_dir)
                    .join("acct_gather_energy_rust_rapl.so")
                    .exists(),
                "installed, but no plugin in the plugin directory"
            );
        } else {
            assert_eq!(
                out.status.code(),
                Some(1),
                "Depends: {depends}; {owner} {version} admitted"
            );
            assert_ne!(status, "ii", "configured beside {owner} {version}");
            let says = format!("Version of {owner} on system is {version}");
            assert!(stderr.contains(&says), "{says:?} not in: {stderr}");
        }
    }
}

/// The spec of the stand-ins for SchedMD's Slurm RPMs: `slurm` (libslurm.so in %{_libdir},
/// libslurmfull.so in %{_libdir}/slurm) and `slurm-devel` (the headers in
/// %{_includedir}/slurm, requiring its `slurm`) as slurm.spec lays them out, of release
/// `standin_version`, from the Slurm this build is for; and `clang-devel`, empty, for the
/// machine's own libclang (libclang-dev). `cp -p`: the headers keep their times, so the
/// bindings built from them are not rebuilt at every run.
const STANDIN_SLURM_SPEC: &str = "\
Name: slurm
Version: %{standin_version}
Release: 1
Summary: stand-in for SchedMD's slurm
License: GPL-2.0-or-later
AutoReqProv: no
%global debug_package %{nil}
%global __os_install_post %{nil}
%global _binary_payload w1.gzdio
%description
stand-in
%package devel
Summary: stand-in for SchedMD's slurm-devel
Requires: slurm = %{version}-%{release}
%description devel
stand-in
%package -n clang-devel
Summary: stand-in for libclang
%description -n clang-devel
stand-in
%install
mkdir -p %{buildroot}%{_includedir}/slurm %{buildroot}%{_libdir}/slurm
cp -pL %{headers}/*.h %{buildroot}%{_includedir}/slurm/
cp -pL %{libslurm} %{buildroot}%{_libdir}/libslurm.so
cp -pL %{libslurmfull} %{buildroot}%{_libdir}/slurm/libslurmfull.so
%files
%{_libdir}/libslurm.so
%{_libdir}/slurm/libslurmfull.so
%files devel
%{_includedir}/slurm
%files -n clang-devel
";

/// `root`, a private root whose RPM database (`root/var/lib/rpm`, nothing else's) has the
/// stand-ins of SchedMD's Slurm of `release` installed (STANDIN_SLURM_SPEC, built in
/// `work`), their files under `root`.
fn rpm_root_with_slurm_devel(work: &Path, root: &Path, release: &str) {
    let lib_dir = Path::new(env!("ENERGY_TESTS_SLURM_LIB_DIR"));
    let spec = work.join("slurm.spec");
    fs::create_dir_all(work).expect("mkdir");
    fs::write(&spec, STANDIN_SLURM_SPEC).expect("the stand-in spec");
    let define = |name: &str, value: &Path| format!("{name} {}", value.display());
    let out = Command::new("rpmbuild")
        .arg("-bb")
        .args(["--define", &define("_topdir", &work.join("top"))])
        .args(["--define", &format!("standin_version {release}")])
        .args([
            "--define",
            &define("headers", &slurm_include_dir().join("slurm")),
        ])
        .args([
            "--define",
            &define("libslurm", &lib_dir.join("../libslurm.so")),
        ])
        .args([
            "--define",
            &define("libslurmfull", &lib_dir.join("libslurmfull.so")),
        ])
        .arg(&spec)
        .output()
        .expect("run rpmbuild (apt install rpm: ci/deps.sh)");
    assert!(
        out.status.success(),
        "rpmbuild the stand-ins: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rpms: Vec<PathBuf> = fs::read_dir(work.join("top/RPMS"))
        .expect("RPMS")
        .flat_map(|arch| fs::read_dir(arch.expect("RPMS/ARCH").path()).expect("RPMS/ARCH"))
        .map(|rpm| rpm.expect("an RPM").path())
        .collect();
    let _ = fs::remove_dir_all(root);
    let rpm = |args: &[&str], files: &[PathBuf]| {
        let out = Command::new("rpm")
            .arg("--root")
            .arg(root)
            .args(["--dbpath", "/var/lib/rpm"])
            .args(args)
            .args(files)
            .output()
            .expect("run rpm");
        assert!(
            out.status.success(),
            "rpm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    rpm(&["--initdb"], &[]);
    rpm(&["-i"], &rpms);
}

/// The headers this build is for, as slurm-bindings finds them: SLURM_INCLUDE_DIR, else
/// SLURM_PREFIX/include, else /usr/include.
fn slurm_include_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    var("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .or_else(|| var("SLURM_PREFIX").map(|p| Path::new(&p).join("include")))
        .unwrap_or_else(|| PathBuf::from("/usr/include"))
}

/// `ci/rpm.sh` as a RHEL admin runs it: HOME `home` (whose .rpmmacros points rpm at
/// `root`'s database), cargo from `cargo_dir` first on PATH (rustup's toolchain, not a
/// package), the headers of `root`'s slurm-devel and SchedMD's plugin directory, the RPM
/// into `out`. Its cargo builds in the target directory rpm.sh keeps (CARGO_TARGET_DIR/
/// rpm-build), seeded from this build's as ci/test.sh seeds it.
fn rpm_sh(home: &Path, root: &Path, cargo_dir: &Path, out: &Path) -> Output {
    fs::create_dir_all(home).expect("mkdir home");
    fs::write(
        home.join(".rpmmacros"),
        format!("%_dbpath {}\n", root.join("var/lib/rpm").display()),
    )
    .expect(".rpmmacros");
    let target = target_dir()
        .parent()
        .expect("the target directory")
        .to_path_buf();
    let rpm_build = target.join("rpm-build");
    if !rpm_build.join("release").exists() {
        let seeded = Command::new("python3")
            .arg(workspace().join("ci/seed-target.py"))
            .arg(&target)
            .arg(&rpm_build)
            .current_dir(workspace())
            .status()
            .expect("run ci/seed-target.py");
        assert!(seeded.success(), "seed {}", rpm_build.display());
    }
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let cargo_home = var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| var("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let mut command = Command::new("/bin/sh");
    command
        .arg(workspace().join("ci/rpm.sh"))
        .env_clear()
        .env("HOME", home)
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", cargo_dir.display()),
        )
        .env("CARGO_HOME", cargo_home)
        .env("CARGO_TARGET_DIR", &target)
        .env("PACKAGE_OUT", out)
        .env("SLURM_INCLUDE_DIR", root.join("usr/include"))
        .env("SLURM_PLUGIN_DIR", "/usr/lib64/slurm")
        // senergy links the stand-in's libslurm.so, found in %{_libdir} as on RHEL (the
        // linker's default there), not this machine's libslurm of another release
        .env("LIBRARY_PATH", root.join("usr/lib64"));
    for name in ["RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "TMPDIR"] {
        if let Some(value) = var(name) {
            command.env(name, value);
        }
    }
    command.output().expect("run ci/rpm.sh")
}

/// The cargo that built this test: `cargo test` says it (`CARGO`); ci/run-tests.py runs the
/// test binaries itself, and then it is the toolchain's own, beside `rustc --print
/// sysroot`'s (not rustup's proxy on PATH, which needs the HOME the build is kept from).
fn cargo_program() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .or_else(|| {
            let out = Command::new("rustc")
                .args(["--print", "sysroot"])
                .output()
                .ok()?;
            let sysroot = String::from_utf8(out.stdout).ok()?;
            Some(Path::new(sysroot.trim()).join("bin/cargo"))
        })
        .filter(|cargo| cargo.is_file())
        .expect("cargo: neither CARGO nor rustc's sysroot has one")
}

#[test]
fn the_rpm_builds_against_slurm_devel_with_a_rustup_cargo() {
    let test = "the_rpm_builds_against_slurm_devel_with_a_rustup_cargo";
    if !root_or_skip(test) {
        return;
    }
    let release = built_release();
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    let out = tmp.path().join("out");
    let cargo = cargo_program();
    let cargo_dir = cargo.parent().expect("cargo's directory");
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    // BuildRequires are checked, against the private database: a slurm-devel of another
    // release is refused before anything is built
    let other = tmp.path().join("other");
    rpm_root_with_slurm_devel(&tmp.path().join("standin-other"), &other, other_release());
    let built = rpm_sh(&home, &other, cargo_dir, &out);
    assert!(
        !built.status.success(),
        "built against slurm-devel {}",
        other_release()
    );
    let needed = format!("slurm-devel = {release} is needed");
    assert!(
        stderr(&built).contains(&needed),
        "{needed:?} not in: {}",
        stderr(&built)
    );

    // the release's slurm-devel, under a fixed path (the headers' path is in the bindings'
    // build: a new one each run would rebuild the workspace)
    let root = target_dir()
        .parent()
        .expect("the target directory")
        .join("rpm-build/slurm-devel-root");
    rpm_root_with_slurm_devel(&tmp.path().join("standin"), &root, &release);
    let root = root.canonicalize().expect("the root");

    // a cargo older than 1.88 first on PATH: refused with what to install
    let old = tmp.path().join("old-cargo");
    fs::create_dir_all(&old).expect("mkdir");
    fs::write(old.join("cargo"), "#!/bin/sh\necho 'cargo 1.63.0'\n").expect("old cargo");
    fs::set_permissions(old.join("cargo"), fs::Permissions::from_mode(0o755)).expect("chmod");
    let built = rpm_sh(&home, &root, &old, &out);
    assert!(!built.status.success(), "built with cargo 1.63");
    for text in [
        "needs cargo 1.88 or later on PATH (found: 1.63.0)",
        "rustup",
    ] {
        assert!(
            stderr(&built).contains(text),
            "{text:?} not in: {}",
            stderr(&built)
        );
    }

    // rustup's cargo (no package provides it): built, without --nodeps
    let built = rpm_sh(&home, &root, cargo_dir, &out);
    assert!(built.status.success(), "ci/rpm.sh: {}", stderr(&built));
    let name = format!(
        "slurm-energy-rust-0.1.0-1.slurm{release}.{}.rpm",
        std::env::consts::ARCH
    );
    let rpm = out.join(&name);
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert_eq!(
        stdout.lines().last(),
        Some(rpm.to_str().expect("UTF-8")),
        "{stdout}"
    );
    let query = |what: &str| {
        let q = Command::new("rpm")
            .args(["-qp", what])
            .arg(&rpm)
            .output()
            .expect("rpm -qp");
        assert!(q.status.success(), "rpm -qp {what}: {}", stderr(&q));
        String::from_utf8_lossy(&q.stdout).into_owned()
    };
    let requires = query("--requires");
    assert!(
        requires
            .lines()
            .any(|r| r.trim() == format!("slurm = {release}")),
        "no `slurm = {release}` in: {requires}"
    );
    let files = query("--list");
    let files: Vec<&str> = files.lines().collect();
    for (plugin, _) in built_plugins() {
        let path = format!("/usr/lib64/slurm/{plugin}.so");
        assert!(files.contains(&path.as_str()), "{path} not in {files:?}");
    }
    assert!(files.contains(&"/usr/lib64/slurm/acct_gather_energy_rust_variorum_sampler"));
    assert!(files.contains(&"/usr/bin/senergy"), "{files:?}");
    // %pre and %preun carry the shell the .deb's preinst and prerm carry, verbatim (rpm
    // expands no macro in it: its %% stay): the tests of those hold for the RPM's, which
    // read the release with sh and od on a host without binutils, and warn on an erase
    for (tag, file, call) in [
        (
            "%{PREIN}",
            "ci/slurm-release.sh",
            format!("check_slurm_release slurm-energy-rust {release} /usr/lib64/slurm"),
        ),
        (
            "%{PREUN}",
            "packaging/slurm-conf-warning.sh",
            "warn_if_slurm_conf_names_rust slurm-energy-rust /usr/lib64/slurm".to_string(),
        ),
    ] {
        let script = query(&format!("--queryformat={tag}"));
        let shared = fs::read_to_string(workspace().join(file)).expect("read the shared script");
        assert!(
            script.contains(&shared),
            "{file} not verbatim in {tag}: {script}"
        );
        assert!(script.contains(&call), "{call:?} not in {tag}: {script}");
    }
    let requires_pre = query("--requires");
    for needed in ["coreutils", "sed", "grep"] {
        assert!(
            requires_pre.lines().any(|r| r.trim() == needed),
            "{needed} not required: {requires_pre}"
        );
    }
    // every example where the conf files say (examples/), as the .deb has them
    let doc = "/usr/share/doc/slurm-energy-rust";
    for entry in fs::read_dir(workspace().join("conf")).expect("conf/") {
        let name = entry.expect("entry").file_name();
        let path = format!("{doc}/examples/{}", name.to_string_lossy());
        assert!(files.contains(&path.as_str()), "{path} not in {files:?}");
    }
    for path in [format!("{doc}/README.md"), format!("{doc}/docs/testing.md")] {
        assert!(files.contains(&path.as_str()), "{path} not in {files:?}");
    }
    assert!(
        !files.iter().any(|f| f.starts_with(&format!("{doc}/conf"))),
        "{files:?}"
    );
}

/// The tools a Debian host without binutils has for a maintainer script: its Essential
/// packages' (dash, coreutils, sed, grep); no readelf, no awk (mawk is not Essential).
const ESSENTIAL_TOOLS: &[&str] = &["sh", "od", "tr", "sed", "expr", "grep", "cat"];

/// The file offset of `file`'s defined dynamic symbol `plugin_version`, as readelf (this
/// machine's binutils, the oracle) finds it: its value, less its section's address, plus
/// that section's offset; `None` where the file has no such symbol.
fn plugin_version_offset(file: &Path) -> Option<u64> {
    let readelf = |args: &[&str]| {
        let out = Command::new("readelf")
            .args(args)
            .arg(file)
            .output()
            .expect("run readelf (binutils), the test's oracle");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // (the header lines' words are no hexadecimal numbers: skipped)
    let hex = |s: &str| u64::from_str_radix(s, 16).ok();
    // "   N: VALUE SIZE TYPE BIND VIS NDX NAME"
    let value = readelf(&["-W", "--dyn-syms"]).lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 8 && f[7] == "plugin_version" && f[6] != "UND" {
            hex(f[1])
        } else {
            None
        }
    })?;
    // "  [Nr] NAME TYPE ADDRESS OFF SIZE ..."
    readelf(&["-W", "-S"]).lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix('[')?;
        let f: Vec<&str> = rest.split(']').nth(1)?.split_whitespace().collect();
        if f.len() < 5 || f[1] == "NOBITS" {
            return None;
        }
        let (addr, off, size) = (hex(f[2])?, hex(f[3])?, hex(f[4])?);
        (addr > 0 && value >= addr && value < addr + size).then(|| value - addr + off)
    })
}

/// `plugin_release FILE` of ci/slurm-release.sh for each of `files`, run by `sh` with `path`
/// alone on PATH: what it printed for each (`None` where it failed).
fn plugin_release_of(path: &Path, files: &[PathBuf]) -> Vec<Option<String>> {
    files
        .iter()
        .map(|file| {
            let out = Command::new("/bin/sh")
                .arg("-c")
                .arg(". \"$0\" && plugin_release \"$1\"")
                .arg(workspace().join("ci/slurm-release.sh"))
                .arg(file)
                .env_clear()
                .env("PATH", path)
                .output()
                .expect("run sh");
            let printed = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() {
                Some(printed)
            } else {
                assert!(
                    printed.is_empty(),
                    "{}: failed, printing {printed:?}",
                    file.display()
                );
                None
            }
        })
        .collect()
}

#[test]
fn plugin_release_reads_every_slurm_plugin_without_binutils() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tool_path(&tmp.path().join("path"), ESSENTIAL_TOOLS);
    // Slurm's own plugins (and libslurmfull.so, which has no plugin_version) and the built
    // ones: each of the headers' release where readelf finds the symbol, none where it
    // finds none
    let mut files: Vec<PathBuf> = fs::read_dir(slurm_plugin_dir())
        .expect("Slurm's plugin directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "so"))
        .collect();
    files.sort();
    files.extend(built_plugins().into_iter().map(|(_, p)| p));
    let read = plugin_release_of(&path, &files);
    let mut with_symbol = 0;
    for (file, release) in files.iter().zip(&read) {
        if plugin_version_offset(file).is_some() {
            with_symbol += 1;
            assert_eq!(
                release.as_deref(),
                Some(built_release().as_str()),
                "{}",
                file.display()
            );
        } else {
            assert_eq!(release, &None, "{}: no plugin_version, yet", file.display());
        }
    }
    println!(
        "{} files, {with_symbol} with plugin_version, each read as {}",
        files.len(),
        built_release()
    );
    assert!(with_symbol > 10, "only {with_symbol} plugins in {files:?}");

    // a plugin of another release: Slurm's own with its plugin_version rewritten where
    // readelf says it is
    let original = slurm_plugin_dir().join("proctrack_pgid.so");
    let offset =
        plugin_version_offset(&original).expect("proctrack_pgid's plugin_version") as usize;
    let other = other_release();
    let mut bytes = fs::read(&original).expect("read proctrack_pgid.so");
    bytes[offset..offset + 4].copy_from_slice(&release_number(other).to_ne_bytes());
    let patched = tmp.path().join("proctrack_pgid.so");
    fs::write(&patched, &bytes).expect("write the patched plugin");
    // and what is no plugin: cut short (its section headers gone), half of it, text
    let short = tmp.path().join("short.so");
    fs::write(&short, &bytes[..bytes.len() - 100]).expect("write");
    let half = tmp.path().join("half.so");
    fs::write(&half, &bytes[..bytes.len() / 2]).expect("write");
    let text = tmp.path().join("text.so");
    fs::write(&text, "plugin_version\0").expect("write");
    let read = plugin_release_of(&path, &[patched, short, half, text]);
    assert_eq!(read, vec![Some(other.to_string()), None, None, None]);
}

/// The `SLURM_VERSION_NUMBER` of a release X.Y.Z.
fn release_number(release: &str) -> u32 {
    let n: Vec<u32> = release
        .split('.')
        .map(|n| n.parse().expect("X.Y.Z"))
        .collect();
    (n[0] << 16) | (n[1] << 8) | n[2]
}

#[test]
fn the_packages_preinst_reads_slurms_release_on_a_host_without_binutils_or_slurmd() {
    let test = "the_packages_preinst_reads_slurms_release_on_a_host_without_binutils_or_slurmd";
    let Some(deb) = deb_or_skip(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let control = tmp.path().join("control");
    let extracted = Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(&control)
        .status()
        .expect("run dpkg-deb -e");
    assert!(extracted.success(), "dpkg-deb -e {}", deb.display());
    let path = tool_path(&tmp.path().join("path"), ESSENTIAL_TOOLS);
    let plugin_dir = deb_plugin_dir(&deb);
    let preinst = |root: &Path| {
        Command::new("/bin/sh")
            .arg(control.join("preinst"))
            .arg("install")
            .env_clear()
            .env("PATH", &path)
            .env("DPKG_ROOT", root)
            .output()
            .expect("run the preinst")
    };
    // a Slurm's plugin directory as its package lays it out, no slurmd beside it: its
    // libslurmfull.so and its proctrack_pgid.so, Slurm's own or one of another release
    // (plugin_version rewritten where readelf finds it)
    let original = slurm_plugin_dir().join("proctrack_pgid.so");
    let with_plugin = |name: &str, release: &str| {
        let root = tmp.path().join(name);
        let dir = slurm_at(root.join(&plugin_dir), None);
        let mut bytes = fs::read(&original).expect("read proctrack_pgid.so");
        let offset = plugin_version_offset(&original).expect("plugin_version") as usize;
        bytes[offset..offset + 4].copy_from_slice(&release_number(release).to_ne_bytes());
        fs::write(dir.join("proctrack_pgid.so"), bytes).expect("write proctrack_pgid.so");
        (root, dir)
    };

    let other = other_release();
    let (root, dir) = with_plugin("other", other);
    let out = preinst(&root);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "preinst: {stderr}");
    let says = format!(
        "{} is Slurm {other}'s (plugin_version of {}/proctrack_pgid.so)",
        dir.display(),
        dir.display()
    );
    assert!(stderr.contains(&says), "{says:?} not in: {stderr}");
    assert!(stderr.contains("nothing installed"), "{stderr}");

    let (root, dir) = with_plugin("same", &built_release());
    let out = preinst(&root);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "preinst: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let says = format!(
        "{} is Slurm {}'s (plugin_version of {}/proctrack_pgid.so), the plugins' release",
        dir.display(),
        built_release(),
        dir.display()
    );
    assert!(stdout.contains(&says), "{says:?} not in: {stdout}");

    // no Slurm there yet (`dpkg -i` of the package before its Slurm): a package that pins
    // its Slurm leaves the release to dpkg's Depends; one for a Slurm installed from
    // source (no Depends on a Slurm) cannot tell, and refuses
    let root = tmp.path().join("none");
    fs::create_dir_all(root.join(&plugin_dir)).expect("mkdir");
    let out = preinst(&root);
    let depends = Command::new("dpkg-deb")
        .arg("-f")
        .arg(&deb)
        .arg("Depends")
        .output()
        .expect("run dpkg-deb -f");
    let depends = String::from_utf8_lossy(&depends.stdout).into_owned();
    let pinned = depends.split(',').any(|d| d.trim().starts_with("slurm"));
    if pinned {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "preinst: {stdout}");
        assert!(
            stdout.contains("yet: dpkg configures this package only beside"),
            "{stdout}"
        );
    } else {
        assert_eq!(
            out.status.code(),
            Some(1),
            "no Depends on Slurm ({depends}), yet"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot tell which Slurm release"),
            "{stderr}"
        );
    }
}

/// A minimal Debian 12 host (tests/package/bookworm-root.sh's cached root: no binutils, no
/// slurmd) of one test: an overlay over the cache, its changes in `scratch` (removed with
/// it), apt's sources Debian's mirror (the lists as cached) and `scratch/repo`, a local file
/// repository (`/srv/repo` inside).
struct Bookworm {
    base: PathBuf,
    scratch: tempfile::TempDir,
}

impl Bookworm {
    /// The host, or `None` where the package is not for Debian 12's Slurm (another release's
    /// build: no package of bookworm can carry it), which `test` then skips saying so.
    fn for_package(test: &str, deb: &Path) -> Option<Bookworm> {
        let depends = Command::new("dpkg-deb")
            .arg("-f")
            .arg(deb)
            .arg("Depends")
            .output()
            .expect("run dpkg-deb -f");
        let depends = String::from_utf8_lossy(&depends.stdout).into_owned();
        if built_release() != "22.05.8" || !depends.contains("slurm-wlm-basic-plugins") {
            eprintln!(
                "SKIPPED {test}: the package is for Slurm {} ({depends}); Debian 12's is \
                 slurm-wlm-basic-plugins 22.05.8",
                built_release()
            );
            return None;
        }
        let started = std::time::Instant::now();
        let out = Command::new("/bin/sh")
            .arg(workspace().join("tests/package/bookworm-root.sh"))
            .output()
            .expect("run bookworm-root.sh");
        assert!(
            out.status.success(),
            "bookworm-root.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let base = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        println!(
            "the Debian 12 root {} ready in {:.1} s",
            base.display(),
            started.elapsed().as_secs_f64()
        );
        let scratch = tempfile::tempdir().expect("tempdir");
        let host = Bookworm { base, scratch };
        fs::create_dir_all(host.scratch.path().join("repo")).expect("mkdir repo");
        host.publish(&[]);
        Some(host)
    }

    /// `script` run by sh as root inside, after apt has read the local repository again;
    /// its output, stdout and stderr together, printed and returned with its status.
    fn run(&self, script: &str) -> (bool, String) {
        let local = "echo 'deb [trusted=yes] file:/srv/repo ./' >/etc/apt/sources.list.d/local.list && \
            apt-get update -qq -o Dir::Etc::SourceList=/etc/apt/sources.list.d/local.list \
            -o Dir::Etc::SourceParts=- -o APT::Get::List-Cleanup=0 && ";
        let started = std::time::Instant::now();
        let out = Command::new("/bin/sh")
            .arg(workspace().join("tests/package/in-root.sh"))
            .arg(&self.base)
            .arg(self.scratch.path())
            .args(["sh", "-c", &format!("exec 2>&1; {local}{script}")])
            .output()
            .expect("run in-root.sh");
        // (dpkg's lines under apt come through a terminal: CR LF)
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .replace("\r\n", "\n");
        println!(
            "---- in Debian 12 ({:.1} s): {script}\n{text}",
            started.elapsed().as_secs_f64()
        );
        (out.status.success(), text)
    }

    /// Copies `debs` into the local repository and indexes it (dpkg-scanpackages).
    fn publish(&self, debs: &[PathBuf]) {
        let repo = self.scratch.path().join("repo");
        for deb in debs {
            fs::copy(deb, repo.join(deb.file_name().expect("a file name"))).expect("copy a .deb");
        }
        // --multiversion: every version there, as a distribution's archive has them
        let out = Command::new("dpkg-scanpackages")
            .args(["--multiversion", ".", "/dev/null"])
            .current_dir(&repo)
            .output()
            .expect("run dpkg-scanpackages (dpkg-dev)");
        assert!(out.status.success(), "dpkg-scanpackages");
        fs::write(repo.join("Packages"), out.stdout).expect("write Packages");
    }

    /// (package, version) of every installed package built from `source`, sorted.
    fn installed_of_source(&self, source: &str) -> Vec<(String, String)> {
        let (ok, text) = self.run(
            "dpkg-query -W -f='${db:Status-Abbrev}|${source:Package}|${Package}|${Version}\\n'",
        );
        assert!(ok, "dpkg-query: {text}");
        let mut found: Vec<(String, String)> = text
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split('|').collect();
                // installed ("ii"), or installed and held ("hi")
                (f.len() == 4 && f[0].get(1..2) == Some("i") && f[1] == source)
                    .then(|| (f[2].to_string(), f[3].to_string()))
            })
            .collect();
        found.sort();
        found
    }

    /// dpkg's status of `package` inside (`ii`, ...; empty where dpkg knows it not).
    fn status(&self, package: &str) -> String {
        let (_, text) = self.run(&format!(
            "dpkg-query -W -f='status=${{db:Status-Abbrev}}\\n' {package} 2>/dev/null || true"
        ));
        text.lines()
            .find_map(|l| l.strip_prefix("status="))
            .unwrap_or("")
            .trim()
            .to_string()
    }

    /// A path inside, as the overlay's upper layer or the cache below it has it (read
    /// from outside, with no namespace: what the package or apt wrote is in the upper).
    fn file(&self, path: &Path) -> Option<PathBuf> {
        let relative = path.strip_prefix("/").expect("an absolute path");
        let upper = self.scratch.path().join("upper").join(relative);
        // an overlay whiteout (a character device 0/0) is a file removed inside
        match fs::symlink_metadata(&upper) {
            Ok(meta) if std::os::unix::fs::FileTypeExt::is_char_device(&meta.file_type()) => None,
            Ok(_) => Some(upper),
            Err(_) => Some(self.base.join(relative)).filter(|p| p.exists()),
        }
    }
}

/// apt-get with what every call here wants: no questions, no Recommends (a minimal host),
/// no fsync (the root is thrown away).
const APT_GET: &str = "apt-get -y -q --no-install-recommends -o Dpkg::Options::=--force-unsafe-io";

#[test]
fn the_package_installs_with_apt_on_a_debian_12_host_without_binutils_or_slurmd() {
    let test = "the_package_installs_with_apt_on_a_debian_12_host_without_binutils_or_slurmd";
    if !root_or_skip(test) {
        return;
    }
    let Some(deb) = deb_or_skip(test) else {
        return;
    };
    let Some(host) = Bookworm::for_package(test, &deb) else {
        return;
    };
    let started = std::time::Instant::now();
    // a controller or login host: no binutils (readelf), no slurmd
    let (ok, text) = host.run(
        "! command -v readelf; dpkg -s binutils >/dev/null 2>&1; echo binutils=$?; \
         dpkg -s slurmd >/dev/null 2>&1; echo slurmd=$?",
    );
    assert!(
        ok && text.contains("binutils=1") && text.contains("slurmd=1"),
        "{text}"
    );
    host.publish(std::slice::from_ref(&deb));
    let (ok, text) = host.run(&format!("{APT_GET} install slurm-energy-rust"));
    assert!(ok, "apt-get install slurm-energy-rust: {text}");
    assert_eq!(host.status("slurm-energy-rust"), "ii");
    // the preinst read Debian's Slurm release from its own plugins (there is no other way
    // on this host)
    let plugin_dir = Path::new("/").join(deb_plugin_dir(&deb));
    let says = format!(
        "slurm-energy-rust: {} is Slurm 22.05.8's (plugin_version of {}/proctrack_pgid.so), \
         the plugins' release",
        plugin_dir.display(),
        plugin_dir.display()
    );
    assert!(text.contains(&says), "{says:?} not in: {text}");
    // apt resolved the Slurm it depends on from Debian's lists (its plugins, and the
    // libslurm senergy links), and no daemon
    let slurm = host.installed_of_source("slurm-wlm");
    let names: Vec<&str> = slurm.iter().map(|(p, _)| p.as_str()).collect();
    assert!(names.contains(&"slurm-wlm-basic-plugins"), "{slurm:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("slurmd") || n.starts_with("slurmctld")),
        "{slurm:?}"
    );
    assert!(
        slurm.iter().all(|(_, v)| v.starts_with("22.05.8-")),
        "{slurm:?}"
    );
    assert_eq!(host.status("binutils"), "", "binutils came with it");
    // the package's plugins are there, as the package has them
    let unpacked = host.scratch.path().join("unpacked");
    let extracted = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&unpacked)
        .status()
        .expect("run dpkg-deb -x");
    assert!(extracted.success(), "dpkg-deb -x");
    for (name, _) in built_plugins() {
        let file = plugin_dir.join(format!("{name}.so"));
        let installed = host
            .file(&file)
            .unwrap_or_else(|| panic!("{} not installed", file.display()));
        assert_eq!(
            fs::read(&installed).expect("read the installed plugin"),
            fs::read(unpacked.join(file.strip_prefix("/").expect("absolute")))
                .expect("read the package's plugin"),
            "{name}.so"
        );
    }
    println!(
        "installed with apt in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The one line of docs/operations.md that starts with `start`, as the admin copies it from
/// its code block (`sudo` dropped: the test runs as root).
fn operations_line(start: &str) -> String {
    let page = fs::read_to_string(workspace().join("docs/operations.md")).expect("operations.md");
    let lines: Vec<&str> = page
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(start))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "docs/operations.md: {start:?} lines: {lines:?}"
    );
    lines[0].replace("sudo ", "")
}

/// `packages` (name, installed version) rebuilt as `version` by tests/package/reversion.sh
/// from the .debs that apt downloaded into the cached root, into `out`.
fn reversioned(
    host: &Bookworm,
    packages: &[(String, String)],
    version: &str,
    out: &Path,
) -> Vec<PathBuf> {
    let arch = String::from_utf8_lossy(
        &Command::new("dpkg")
            .arg("--print-architecture")
            .output()
            .expect("dpkg --print-architecture")
            .stdout,
    )
    .trim()
    .to_string();
    let debs: Vec<PathBuf> = packages
        .iter()
        .map(|(name, installed)| {
            // apt's file name: the epoch's colon as %3a
            let file = format!("{name}_{}_{arch}.deb", installed.replace(':', "%3a"));
            host.file(&Path::new("/var/cache/apt/archives").join(&file))
                .unwrap_or_else(|| panic!("{file} not in the root's apt cache"))
        })
        .collect();
    let out_dir = out.join(version);
    let status = Command::new("/bin/sh")
        .arg(workspace().join("tests/package/reversion.sh"))
        .arg(version)
        .arg(&out_dir)
        .args(&debs)
        .status()
        .expect("run reversion.sh");
    assert!(status.success(), "reversion.sh {version}");
    fs::read_dir(&out_dir)
        .expect("the rebuilt packages")
        .map(|e| e.expect("entry").path())
        .collect()
}

#[test]
fn apt_keeps_the_plugins_through_a_slurm_revision_and_removes_them_as_documented_for_a_new_release()
{
    let test = "apt_keeps_the_plugins_through_a_slurm_revision_and_removes_them_as_documented_for_a_new_release";
    if !root_or_skip(test) {
        return;
    }
    let Some(deb) = deb_or_skip(test) else {
        return;
    };
    let Some(host) = Bookworm::for_package(test, &deb) else {
        return;
    };
    let started = std::time::Instant::now();
    let plugin = Path::new("/")
        .join(deb_plugin_dir(&deb))
        .join("acct_gather_energy_rust_rapl.so");
    // a node that is its own controller, configured with the plugin
    host.publish(std::slice::from_ref(&deb));
    let (ok, text) = host.run(&format!(
        "{APT_GET} install slurm-energy-rust slurmd slurmctld && mkdir -p /etc/slurm && \
         printf 'ClusterName=test\\nSlurmctldHost=node1\\n# energy\\n\
         AcctGatherEnergyType=acct_gather_energy/rust_rapl # RAPL\\n' >/etc/slurm/slurm.conf"
    ));
    assert!(ok, "install: {text}");
    let slurm = host.installed_of_source("slurm-wlm");
    let installed = &slurm[0].1;
    assert!(installed.starts_with("22.05.8-"), "{slurm:?}");
    let versions = |host: &Bookworm| -> Vec<String> {
        host.installed_of_source("slurm-wlm")
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    };
    let all = |version: &str| vec![version.to_string(); slurm.len()];
    let work = host.scratch.path().join("rebuilt");

    // a Debian revision of the same release (a security update): apt-get full-upgrade takes
    // it and keeps the plugins, which the package's Depends admit with any revision
    let revision = format!("{installed}+energytest1");
    host.publish(&reversioned(&host, &slurm, &revision, &work));
    let (ok, text) = host.run(&format!("{APT_GET} full-upgrade"));
    assert!(ok, "full-upgrade: {text}");
    assert_eq!(versions(&host), all(&revision), "{text}");
    assert_eq!(host.status("slurm-energy-rust"), "ii", "{text}");
    assert!(host.file(&plugin).is_some(), "{} gone", plugin.display());
    assert!(!text.contains("WARNING"), "{text}");

    // the next upstream release and a later revision of this one in the repository
    let next = "22.05.9-1";
    let revision2 = format!("{installed}+energytest2");
    let mut debs = reversioned(&host, &slurm, next, &work);
    debs.extend(reversioned(&host, &slurm, &revision2, &work));
    host.publish(&debs);

    // the pin of docs/operations.md: full-upgrade takes the revision, not the release
    let pin = operations_line("printf 'Package: src:slurm-wlm");
    let (ok, text) = host.run(&format!("{pin} && {APT_GET} full-upgrade"));
    assert!(ok, "pin, full-upgrade: {text}");
    assert_eq!(versions(&host), all(&revision2), "{text}");
    assert_eq!(host.status("slurm-energy-rust"), "ii", "{text}");
    let (ok, text) = host.run("rm /etc/apt/preferences.d/slurm-release");
    assert!(ok, "{text}");

    // apt-get upgrade never removes a package: it keeps back what pins the plugins'
    // release, and moves libslurm38 alone (Debian's pins no other package's version)
    let (ok, text) = host.run(&format!("{APT_GET} upgrade"));
    assert!(ok, "upgrade: {text}");
    assert!(text.contains("kept back"), "{text}");
    let libslurm_moves = |version: &str| -> Vec<String> {
        slurm
            .iter()
            .map(|(name, _)| {
                if name.starts_with("libslurm") {
                    next.to_string()
                } else {
                    version.to_string()
                }
            })
            .collect()
    };
    assert_eq!(versions(&host), libslurm_moves(&revision2), "{text}");
    assert_eq!(host.status("slurm-energy-rust"), "ii");

    // the hold of docs/operations.md: full-upgrade changes nothing
    let hold = operations_line("sudo apt-mark hold ");
    let (ok, text) = host.run(&format!("{hold} && {APT_GET} full-upgrade"));
    assert!(ok, "hold, full-upgrade: {text}");
    assert_eq!(versions(&host), libslurm_moves(&revision2), "{text}");
    assert_eq!(host.status("slurm-energy-rust"), "ii", "{text}");

    // without it, full-upgrade moves Slurm to 22.05.9 and removes the package, whose prerm
    // names the slurm.conf line that slurmd can no longer start with
    let unhold = hold.replacen("apt-mark hold", "apt-mark unhold", 1);
    let (ok, text) = host.run(&format!("{unhold} && {APT_GET} full-upgrade"));
    assert!(ok, "full-upgrade: {text}");
    assert_eq!(versions(&host), all(next), "{text}");
    assert!(
        text.contains("The following packages will be REMOVED:\n  slurm-energy-rust\n"),
        "{text}"
    );
    assert_ne!(host.status("slurm-energy-rust"), "ii");
    assert!(
        host.file(&plugin).is_none(),
        "{} still there",
        plugin.display()
    );
    for says in [
        "slurm-energy-rust: WARNING: slurm.conf names a plugin that this removal deletes:",
        "  /etc/slurm/slurm.conf line 4: AcctGatherEnergyType=acct_gather_energy/rust_rapl\n",
        "slurmd and slurmctld cannot load that plugin once it is gone: they will fail to",
    ] {
        assert!(text.contains(says), "{says:?} not in: {text}");
    }
    println!(
        "install, two upgrades, pin, hold, removal: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn the_packages_prerm_names_each_slurm_conf_line_that_loads_a_rust_plugin_and_never_fails() {
    let test =
        "the_packages_prerm_names_each_slurm_conf_line_that_loads_a_rust_plugin_and_never_fails";
    let Some(deb) = deb_or_skip(test) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let control = tmp.path().join("control");
    let extracted = Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(&control)
        .status()
        .expect("run dpkg-deb -e");
    assert!(extracted.success(), "dpkg-deb -e {}", deb.display());
    let path = tool_path(&tmp.path().join("path"), ESSENTIAL_TOOLS);
    let root = tmp.path().join("root");
    let etc = root.join("etc/slurm");
    fs::create_dir_all(etc.join("conf.d")).expect("mkdir");
    let prerm = |action: &str| {
        let out = Command::new("/bin/sh")
            .arg(control.join("prerm"))
            .arg(action)
            .env_clear()
            .env("PATH", &path)
            .env("DPKG_ROOT", &root)
            .output()
            .expect("run the prerm");
        assert_eq!(out.status.code(), Some(0), "prerm {action}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // the plugin only in comments, or after a value's #: nothing to say
    fs::write(
        etc.join("slurm.conf"),
        "ClusterName=c\n#AcctGatherEnergyType=acct_gather_energy/rust_rapl\n\
         AcctGatherEnergyType=acct_gather_energy/ipmi # was rust_ipmi\n",
    )
    .expect("slurm.conf");
    assert_eq!(prerm("remove"), "");
    // the key in any case, and in a file slurm.conf includes (relative to its directory)
    fs::write(
        etc.join("slurm.conf"),
        "ClusterName=c\ninclude conf.d/energy.conf\n",
    )
    .expect("slurm.conf");
    fs::write(
        etc.join("conf.d/energy.conf"),
        "\n  acctgatherenergytype = acct_gather_energy/rust_gpu\n",
    )
    .expect("energy.conf");
    let said = prerm("remove");
    for says in [
        "slurm-energy-rust: WARNING: slurm.conf names a plugin that this removal deletes:\n",
        "  /etc/slurm/conf.d/energy.conf line 2: acctgatherenergytype = acct_gather_energy/rust_gpu\n",
        "they will fail to\n",
    ] {
        assert!(said.contains(says), "{says:?} not in: {said}");
    }
    assert_eq!(said.matches(" line ").count(), 1, "{said}");
    // an upgrade of the package itself removes nothing that slurm.conf names
    assert_eq!(prerm("upgrade"), "");
}
