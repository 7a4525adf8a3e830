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
    let path = tmp.join("path");
    fs::create_dir_all(&path).expect("mkdir path");
    let tools = [
        "sh", "awk", "readelf", "od", "tr", "sed", "install", "mkdir", "basename", "dirname", "ls",
        "expr", "cat",
    ];
    for tool in tools.iter().filter(|t| !path.join(t).exists()) {
        let found = ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("install.sh needs {tool}, found in no system directory"));
        std::os::unix::fs::symlink(found, path.join(tool)).expect("link a tool");
    }
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
    // the directory the package installs into (./usr/lib/<multiarch>/slurm-wlm/...), which
    // the preinst asks under DPKG_ROOT (dpkg --root)
    let listing = Command::new("dpkg-deb")
        .arg("-c")
        .arg(&deb)
        .output()
        .expect("run dpkg-deb -c");
    let listing = String::from_utf8_lossy(&listing.stdout);
    let plugin = listing
        .split_whitespace()
        .find(|f| f.ends_with("/acct_gather_energy_rust_rapl.so"))
        .unwrap_or_else(|| panic!("no rust_rapl plugin in {}: {listing}", deb.display()));
    let plugin_dir = Path::new(plugin.trim_start_matches('.'))
        .parent()
        .expect("a directory")
        .strip_prefix("/")
        .expect("an absolute path");
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
