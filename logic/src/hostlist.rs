//! Slurm host lists (`n[1-3,7],gpu[01-02]`, gres.conf's `/dev/nvidia[0-3]`) to names, in
//! order: a step's `*_nodeid` fields index its node list.

use thiserror::Error;

/// A host list that cannot be expanded (the list as given).
#[derive(Debug, Error, PartialEq)]
#[error("cannot expand the node list {0:?}")]
pub struct BadHostList(pub String);

/// Each host a Slurm host list (`node[1-3,5]`) names, in order.
pub fn expand(list: &str) -> Result<Vec<String>, BadHostList> {
    let bad = || BadHostList(list.to_string());
    let mut names = Vec::new();
    for item in split_top_level(list).map_err(|()| bad())? {
        if item.is_empty() {
            continue;
        }
        match item.find('[') {
            None => names.push(item.to_string()),
            Some(open) => {
                let close = item.find(']').ok_or_else(bad)?;
                let (prefix, suffix) = (&item[..open], &item[close + 1..]);
                if suffix.contains('[') {
                    return Err(bad());
                }
                for range in item[open + 1..close].split(',') {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    let width = lo.len();
                    let (lo, hi): (u64, u64) = (
                        lo.parse().map_err(|_| bad())?,
                        hi.parse().map_err(|_| bad())?,
                    );
                    if hi < lo || hi - lo > 1_000_000 {
                        return Err(bad());
                    }
                    names.extend((lo..=hi).map(|n| format!("{prefix}{n:0width$}{suffix}")));
                }
            }
        }
    }
    Ok(names)
}

/// A Slurm host list naming `names`, in order: runs of names that differ only in a
/// trailing number of the same width become ranges (`nid[001000-001023]`), as `expand`
/// reads them back.
pub fn compress<S: AsRef<str>>(names: &[S]) -> String {
    // (prefix, width, ranges) of each item, or a name without a number (no ranges)
    type Item = (String, usize, Vec<(u64, u64)>);
    let mut items: Vec<Item> = Vec::new();
    for name in names.iter().map(AsRef::as_ref) {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, number) = name.split_at(name.len() - digits);
        // a name with brackets, commas or no trailing number stays as it is
        let plain = !name.contains(['[', ']', ',']);
        let Some(n) = number.parse::<u64>().ok().filter(|_| plain && digits <= 18) else {
            items.push((name.to_string(), 0, Vec::new()));
            continue;
        };
        match items.last_mut() {
            Some((p, w, ranges)) if p == prefix && *w == digits && !ranges.is_empty() => {
                match ranges.last_mut() {
                    Some((_, hi)) if *hi + 1 == n => *hi = n,
                    _ => ranges.push((n, n)),
                }
            }
            _ => items.push((prefix.to_string(), digits, vec![(n, n)])),
        }
    }
    let each: Vec<String> = items
        .into_iter()
        .map(|(prefix, width, ranges)| match ranges.as_slice() {
            [] => prefix,
            [(lo, hi)] if lo == hi => format!("{prefix}{lo:0width$}"),
            _ => {
                let inside: Vec<String> = ranges
                    .iter()
                    .map(|(lo, hi)| match lo == hi {
                        true => format!("{lo:0width$}"),
                        false => format!("{lo:0width$}-{hi:0width$}"),
                    })
                    .collect();
                format!("{prefix}[{}]", inside.join(","))
            }
        })
        .collect();
    each.join(",")
}

/// Splits at the commas outside brackets.
fn split_top_level(list: &str) -> Result<Vec<&str>, ()> {
    let (mut depth, mut start, mut items) = (0u32, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.checked_sub(1).ok_or(())?,
            ',' if depth == 0 => {
                items.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(());
    }
    items.push(list[start..].trim());
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_ranges_in_order() {
        assert_eq!(
            expand("n[1-3]").expect("valid in this test"),
            ["n1", "n2", "n3"]
        );
        assert_eq!(
            expand("a1,gpu[01-02,7],b").expect("valid in this test"),
            ["a1", "gpu01", "gpu02", "gpu7", "b"]
        );
        assert_eq!(
            expand("r[8-10]x").expect("valid in this test"),
            ["r8x", "r9x", "r10x"]
        );
        assert_eq!(
            expand("").expect("valid in this test"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn compresses_what_it_expands() {
        let names: Vec<String> = (1000..2024).map(|n| format!("nid{n:06}")).collect();
        assert_eq!(compress(&names), "nid[001000-002023]");
        assert_eq!(expand(&compress(&names)).expect("its own"), names);
        for list in [
            "a1,gpu[01-02,07],b",
            "n[1-3,5],m7,n[8-9]",
            "x,y",
            "",
            "n[09-10]",
        ] {
            let names = expand(list).expect("valid in this test");
            assert_eq!(expand(&compress(&names)).expect("its own"), names, "{list}");
        }
        assert_eq!(compress(&["n09", "n10", "n8"]), "n[09-10],n8");
        assert_eq!(compress(&["n1", "n01"]), "n1,n01");
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in ["n[1-", "n[3-1]", "n]1[", "n[a-b]", "n[1-2][3-4]"] {
            assert!(expand(bad).is_err(), "{bad}");
        }
    }
}
