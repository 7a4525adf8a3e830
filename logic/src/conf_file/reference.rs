//! The key reference, `docs/keys.md`: every acct_gather.conf key of the family with its
//! plugin, its default and its text, made from the tables the plugins parse with
//! (`config_keys!`), so that the page cannot say other than the code. The test fails when
//! the page differs; `REGENERATE_KEY_REFERENCE=1` writes it anew.

use super::{Group, groups};
use crate::config::KeyValues;
use crate::ipmi::{IGNORED_KEYS, KEY_VARIABLE};

/// A table cell: one line, no `|` to end it early.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A value no key takes.
const PROBE: &str = "\u{1}";

/// What `key` takes, as its parser says when given a value nothing takes (the parse slurmd
/// runs, so the page cannot promise more or less): "expected seconds from 0.1 to 3600".
fn takes(group: &Group, key: &'static str) -> String {
    let mut values = KeyValues::new();
    values.set(key, PROBE);
    match (group.parse)(&values) {
        Err(e) if e.key == key => match e.reason.rfind("expected ") {
            Some(at) => e.reason[at + "expected ".len()..].to_string(),
            // "\"\u{1}\" is not LABEL=ids": what it is not is the probe
            None => e.reason.replace(&format!("{PROBE:?} is not "), ""),
        },
        _ => "any text".to_string(),
    }
}

/// The page.
fn render() -> String {
    let mut page = String::from(
        "# acct_gather.conf keys\n\n\
         Every key of the family, with the plugin that reads it, its default (as `scontrol \
         show config` shows it) and what it does. One acct_gather.conf may hold the keys of \
         every plugin: each plugin registers them all with Slurm (whose parser is fatal at a \
         key no loaded plugin registers) and reads its own and the keys every plugin reads. \
         Keys are case-insensitive. Check a file before it is pushed to the nodes with \
         `senergy check --conf FILE` ([senergy.md](senergy.md)).\n\n\
         This page is made from the code's own key tables by the test \
         `conf_file::reference::tests::the_key_reference_is_the_codes`, which fails when \
         they differ (`REGENERATE_KEY_REFERENCE=1 cargo test -p slurm-energy-logic \
         the_key_reference` writes it anew).\n",
    );
    let groups = groups();
    let runtime: Vec<_> = groups.iter().filter(|g| g.name.is_empty()).collect();
    let mut section = |title: &str, groups: &[&Group]| {
        page.push_str(&format!(
            "\n## {title}\n\n| key | takes | default | what it does |\n|---|---|---|---|\n"
        ));
        for group in groups {
            for d in (group.reference)() {
                let default = match &d.default {
                    Some(shown) if shown.is_empty() => "(not set)".to_string(),
                    Some(shown) => format!("`{}`", shown.replace('|', "\\|")),
                    None => "(never shown: a password)".to_string(),
                };
                page.push_str(&format!(
                    "| `{}` | {} | {default} | {} |\n",
                    d.key,
                    cell(&takes(group, d.key)),
                    cell(d.text)
                ));
            }
        }
    };
    section(
        "Read by every plugin: attribution, Slurm's step record, the metrics file",
        &runtime,
    );
    for group in groups.iter().filter(|g| !g.name.is_empty()) {
        section(group.name, &[group]);
    }
    page.push_str(&format!(
        "\nrust_ipmi also registers, and ignores, Slurm's own ipmi plugin's keys, so that a \
         file written for Slurm's plugin is taken as it is: `{KEY_VARIABLE}`, {}.\n",
        IGNORED_KEYS
            .iter()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_reference_is_the_codes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/keys.md");
        let page = render();
        if std::env::var_os("REGENERATE_KEY_REFERENCE").is_some() {
            std::fs::write(path, &page).expect("write docs/keys.md");
        }
        let on_disk = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            on_disk == page,
            "docs/keys.md is not the code's key tables: run \
             REGENERATE_KEY_REFERENCE=1 cargo test -p slurm-energy-logic the_key_reference"
        );
        // every key the family registers is on the page
        for key in crate::family::keys() {
            assert!(page.contains(&format!("`{key}`")), "{key}");
        }
    }
}
