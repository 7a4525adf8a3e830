use super::*;
use crate::config::KeyValues;
use std::fs;

#[test]
fn the_files_mode_group_and_owners_are_configurable_and_bad_values_named() {
    let parse = |pairs: &[(&'static str, &str)]| {
        let mut values = KeyValues::new();
        for (k, v) in pairs {
            values.set(k, *v);
        }
        MetricsConfig::parse(&values)
    };
    let open = PrivateData::default();
    let default = parse(&[]).expect("defaults");
    assert_eq!(
        (default.mode, &default.group, default.owners),
        (None, &None, None)
    );
    let effect = default.in_effect(open);
    assert_eq!(
        default.access(&effect),
        Ok(Access {
            mode: 0o644,
            group: None
        })
    );
    assert!(effect.owners);
    let set = parse(&[(MODE_KEY, "0640"), (GROUP_KEY, "4242"), (OWNERS_KEY, "No")]).expect("valid");
    let effect = set.in_effect(open);
    assert_eq!(
        set.access(&effect),
        Ok(Access {
            mode: 0o640,
            group: Some(4242)
        })
    );
    assert!(!effect.owners);
    assert_eq!(
        set.shown(open)[1..],
        [
            (MODE_KEY, "0640".to_string()),
            (GROUP_KEY, "4242".to_string()),
            (OWNERS_KEY, "no".to_string())
        ]
    );
    assert_eq!(parse(&[(MODE_KEY, "600")]).map(|c| c.mode), Ok(Some(0o600)));
    // a name is looked up where the file is written
    let root = parse(&[(GROUP_KEY, "root")]).expect("a name");
    let effect = root.in_effect(open);
    assert_eq!(root.access(&effect).map(|a| a.group), Ok(Some(0)));
    let unknown = parse(&[(GROUP_KEY, "no-such-group-here")]).expect("a name");
    let e = unknown
        .access(&unknown.in_effect(open))
        .expect_err("unknown");
    assert_eq!((e.key, e.value.as_str()), (GROUP_KEY, "no-such-group-here"));
    assert!(e.to_string().contains("no such group"), "{e}");
    for (key, bad) in [
        (MODE_KEY, "0666"),
        (MODE_KEY, "0646"),
        (MODE_KEY, "4755"),
        (MODE_KEY, "rw-r--r--"),
        (MODE_KEY, "0x1a4"),
        (MODE_KEY, "0o644"),
        (MODE_KEY, "01777"),
        (GROUP_KEY, "99999999999"),
        (GROUP_KEY, "node exporter"),
        (GROUP_KEY, "-g"),
        (OWNERS_KEY, "maybe"),
    ] {
        let e = parse(&[(key, bad)]).expect_err(bad);
        assert_eq!((e.key, e.value.as_str()), (key, bad));
        assert!(e.to_string().contains(&format!("{key}={bad}")), "{e}");
    }
}

#[test]
fn the_file_is_replaced_whole_and_removed_when_slurmd_stops() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("energy.prom");
    let readable = Access {
        mode: DEFAULT_MODE,
        group: None,
    };
    let mut file = MetricsFile::open(&path, readable).expect("opened");
    file.write("a 1\n");
    file.write("a 2\n");
    assert_eq!(fs::read_to_string(&path).expect("file"), "a 2\n");
    let names: Vec<_> = fs::read_dir(tmp.path()).expect("dir").flatten().collect();
    assert_eq!(names.len(), 1, "no temporary file is left behind");
    // node_exporter's user plants a link at the name the file once went through
    let outside = tempfile::NamedTempFile::new().expect("outside");
    fs::write(outside.path(), "root's\n").expect("outside");
    std::os::unix::fs::symlink(outside.path(), tmp.path().join("energy.prom.tmp")).expect("link");
    file.write("a 3\n");
    assert_eq!(fs::read_to_string(&path).expect("file"), "a 3\n");
    assert_eq!(
        fs::read_to_string(outside.path()).expect("outside"),
        "root's\n"
    );
    drop(file);
    assert!(!path.exists());
}

/// PrivateData's flags that hide jobs, each alone and all, against the admin's keys:
/// a key the admin set wins, a key left out is private where jobs are hidden, and the
/// log line says who can read the file and, where not all, which key lets node_exporter.
#[test]
fn where_private_data_hides_jobs_the_file_is_private_unless_the_admin_said_otherwise() {
    let flags = |jobs, usage, users| PrivateData { jobs, usage, users };
    let hiding = [
        flags(true, false, false),
        flags(false, true, false),
        flags(false, false, true),
        flags(true, true, true),
    ];
    // the admin's keys; (mode, owners) in effect where jobs are hidden, and where not
    type Row = (
        &'static [(&'static str, &'static str)],
        (u32, bool),
        (u32, bool),
    );
    let table: &[Row] = &[
        (&[], (0o600, false), (0o644, true)),
        (&[(GROUP_KEY, "4242")], (0o640, false), (0o644, true)),
        (&[(MODE_KEY, "0644")], (0o644, false), (0o644, true)),
        (&[(OWNERS_KEY, "yes")], (0o600, true), (0o644, true)),
        (&[(OWNERS_KEY, "no")], (0o600, false), (0o644, false)),
        (
            &[(MODE_KEY, "0640"), (OWNERS_KEY, "yes")],
            (0o640, true),
            (0o640, true),
        ),
        (
            &[(MODE_KEY, "0600"), (GROUP_KEY, "4242")],
            (0o600, false),
            (0o600, true),
        ),
    ];
    let path = Path::new("/var/lib/node_exporter/energy.prom");
    for (keys, hidden, open) in table {
        let mut values = KeyValues::new();
        for (k, v) in *keys {
            values.set(k, *v);
        }
        let config = MetricsConfig::parse(&values).expect("valid");
        let cases = hiding
            .iter()
            .map(|p| (*p, *hidden))
            .chain([(PrivateData::default(), *open)]);
        for (private, (mode, owners)) in cases {
            let at = format!("{keys:?} {private:?}");
            let effect = config.in_effect(private);
            assert_eq!((effect.mode, effect.owners), (mode, owners), "{at}");
            assert_eq!(config.access(&effect).map(|a| a.mode), Ok(mode), "{at}");
            // scontrol show config: what is in effect, and why where PrivateData chose
            let because = |admin: bool| match (private.hides_jobs(), admin) {
                (true, false) => " (PrivateData)",
                _ => "",
            };
            let set = |key| keys.iter().any(|(k, _)| *k == key);
            let shown = config.shown(private);
            assert_eq!(
                shown[1],
                (MODE_KEY, format!("{mode:04o}{}", because(set(MODE_KEY)))),
                "{at}"
            );
            let yes = if owners { "yes" } else { "no" };
            assert_eq!(
                shown[3],
                (OWNERS_KEY, format!("{yes}{}", because(set(OWNERS_KEY)))),
                "{at}"
            );
            let line = effect.describe(path, config.group.as_ref());
            assert!(line.contains(&path.display().to_string()), "{line}");
            let everyone = line.contains("readable by every user");
            assert_eq!(everyone, mode & 0o004 != 0, "{at}: {line}");
            assert_eq!(line.contains(GROUP_KEY), !everyone, "{at}: {line}");
            let named = if owners { "names each" } else { "names no" };
            assert!(line.contains(named), "{at}: {line}");
            assert!(!line.contains("  "), "one line of words: {line:?}");
        }
    }
}

/// The directory is swapped for a link to another after slurmd opened the file: every
/// write still lands in the directory first opened, and slurmd's stop removes the file
/// there, never the name the link leads to.
#[test]
fn a_directory_swapped_for_a_link_after_opening_is_never_followed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (dir, moved, elsewhere) = (
        tmp.path().join("textfile"),
        tmp.path().join("moved"),
        tmp.path().join("elsewhere"),
    );
    fs::create_dir(&dir).expect("dir");
    fs::create_dir(&elsewhere).expect("elsewhere");
    fs::write(elsewhere.join("energy.prom"), "root's\n").expect("elsewhere's");
    let readable = Access {
        mode: DEFAULT_MODE,
        group: None,
    };
    let mut file = MetricsFile::open(&dir.join("energy.prom"), readable).expect("opened");
    file.write("a 1\n");
    fs::rename(&dir, &moved).expect("moved");
    std::os::unix::fs::symlink(&elsewhere, &dir).expect("link");
    file.write("a 2\n");
    assert_eq!(
        fs::read_to_string(moved.join("energy.prom")).expect("moved"),
        "a 2\n"
    );
    let names = |d: &Path| -> Vec<_> {
        fs::read_dir(d)
            .expect("dir")
            .flatten()
            .map(|e| e.file_name())
            .collect()
    };
    assert_eq!(
        names(&elsewhere).len(),
        1,
        "nothing created through the link"
    );
    drop(file);
    assert!(!moved.join("energy.prom").exists());
    assert_eq!(
        fs::read_to_string(elsewhere.join("energy.prom")).expect("kept"),
        "root's\n"
    );
}

/// A link in the file's path, as an ancestor or as the directory itself: refused, the
/// error naming the key and the link, and nothing written where it points.
#[test]
fn a_link_in_the_files_path_is_refused_naming_the_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let real = tmp.path().join("real");
    fs::create_dir_all(real.join("textfile")).expect("dirs");
    let ancestor = tmp.path().join("ancestor");
    std::os::unix::fs::symlink(&real, &ancestor).expect("link");
    let directory = tmp.path().join("directory");
    std::os::unix::fs::symlink(real.join("textfile"), &directory).expect("link");
    let readable = Access {
        mode: DEFAULT_MODE,
        group: None,
    };
    for (path, link) in [
        (ancestor.join("textfile/energy.prom"), &ancestor),
        (directory.join("energy.prom"), &directory),
    ] {
        let Err(e) = MetricsFile::open(&path, readable) else {
            panic!("{} opened through a link", path.display());
        };
        assert_eq!(
            (e.key, e.value.as_str()),
            (FILE_KEY, path.to_str().expect("utf-8"))
        );
        let text = e.to_string();
        assert!(
            text.contains(&format!("{} is a symbolic link", link.display())),
            "{text}"
        );
    }
    assert_eq!(fs::read_dir(real.join("textfile")).expect("dir").count(), 0);
}
