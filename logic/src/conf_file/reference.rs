//! The key reference, `docs/keys.md`: every acct_gather.conf key of the family with its
//! plugin, its default and its text, made from the tables the plugins parse with
//! (`config_keys!`), so that the page cannot say other than the code. The test fails when
//! the page differs; `REGENERATE_KEY_REFERENCE=1` writes it anew.

use super::{Group, groups};
use crate::config::KeyValues;
use crate::ipmi::{IGNORED_KEYS, KEY_VARIABLE};

/// A table cell: one line, no `|` to end it early, each page of the docs it names
/// (`docs/shared-nodes.md`) a link to that page, which lies beside this one.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .map(|word| match pages_named(word).first() {
            Some(page) => word.replacen(&format!("docs/{page}"), &format!("[{page}]({page})"), 1),
            None => word.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The pages of the docs `text` names (`docs/NAME.md`): `NAME.md` each.
fn pages_named(text: &str) -> Vec<&str> {
    text.match_indices("docs/")
        .filter_map(|(at, _)| {
            let rest = &text[at + "docs/".len()..];
            let name = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .map_or(rest, |end| &rest[..end]);
            (!name.is_empty() && rest[name.len()..].starts_with(".md"))
                .then(|| &rest[..name.len() + ".md".len()])
        })
        .collect()
}

/// A value no key takes, so that its parser says what it takes: a control character, a
/// space inside (no host name or Id has one) and a slash not at the start (no file name, and
/// no absolute path).
const PROBE: &str = "\u{1} \u{1}/";

/// What `key` takes, as its parser says when given a value nothing takes (the parse slurmd
/// runs, so the page cannot promise more or less): "expected seconds from 0.1 to 3600".
fn takes(group: &Group, key: &'static str) -> String {
    let mut values = KeyValues::new();
    values.set(key, PROBE);
    match (group.parse)(&values) {
        Err(e) if e.key == key => match e.reason.rfind("expected ") {
            Some(at) => e.reason[at + "expected ".len()..].to_string(),
            // "\"\u{1} \u{1}/\" is not LABEL=ids": what it is not is the probe
            None => e.reason.replace(&format!("{PROBE:?} is not "), ""),
        }
        // "/redfish/v1/Chassis/<Id>": text, not a tag
        .replace('<', "&lt;")
        .replace('>', "&gt;"),
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

    /// The figures in `text`: numbers standing alone ("1.5", "20 000" one number), not
    /// the digits of a name or path (`/dev/ipmi0`, `libnvidia-ml.so.1`).
    fn numbers(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        let in_name = |c: &char| c.is_ascii_alphanumeric() || "/_.-%".contains(*c);
        let mut found = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            if !chars[i].is_ascii_digit() || (i > 0 && in_name(&chars[i - 1])) {
                i += 1;
                continue;
            }
            let mut number = String::new();
            while let Some(&c) = chars.get(i) {
                let digit_follows = chars.get(i + 1).is_some_and(char::is_ascii_digit);
                if c.is_ascii_digit() || (c == '.' && digit_follows) {
                    number.push(c);
                } else if !(matches!(c, ' ' | '\u{202f}') && digit_follows) {
                    break;
                }
                i += 1;
            }
            // "ipmi0a", "2x": a name's
            if !chars
                .get(i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
            {
                found.push(number);
            }
        }
        found
    }

    /// The page is an admin's: no Rust path, intra-doc link or `None`, no constant's name;
    /// a text that says what happens where the key is not set gives the default's figures
    /// (a constant changed, its text cannot go on giving the old one); every page of the
    /// docs a text names exists.
    #[test]
    fn the_texts_are_an_admins_and_give_the_defaults_figures() {
        for group in groups() {
            for d in (group.reference)() {
                let text = cell(d.text);
                for rust in ["::", "[`", "`None`", "`Some", "`Option"] {
                    assert!(!text.contains(rust), "{}: {rust:?} in {text:?}", d.key);
                }
                let constant = text.split('`').skip(1).step_by(2).find(|code| {
                    code.contains('_')
                        && code
                            .chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
                });
                assert!(constant.is_none(), "{}: {constant:?} in {text:?}", d.key);
                let default = d.default.clone().unwrap_or_default();
                if text.to_ascii_lowercase().contains("not set") {
                    let given = numbers(&text);
                    for figure in numbers(&default) {
                        assert!(
                            given.contains(&figure),
                            "{}: the default {default:?} has {figure}, its text {text:?} not",
                            d.key
                        );
                    }
                }
                for page in pages_named(d.text) {
                    let path = format!("{}/../docs/{page}", env!("CARGO_MANIFEST_DIR"));
                    assert!(std::path::Path::new(&path).is_file(), "{}: {path}", d.key);
                }
            }
        }
        assert_eq!(
            numbers("else 20 000 W, times 1.5 (0.1 to 3600) /dev/ipmi0 libnvidia-ml.so.1."),
            ["20000", "1.5", "0.1", "3600"]
        );
    }
}
