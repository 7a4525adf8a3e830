//! What `senergy check --compare` says: its comparison in lines for people, or as JSON.

use serde_json::{Value, json};

use super::verdict::{Comparison, Verdict};
use crate::check::readers::Scope;

fn scope_name(scope: Scope) -> &'static str {
    match scope {
        Scope::Packages => "packages+dram",
        Scope::WholeNode => "whole node",
        Scope::Gpus => "gpus",
    }
}

pub fn text(c: &Comparison) -> String {
    let mut out = format!("compare: over {:.1} s\n", c.window_s);
    for r in &c.readers {
        let said = match &r.outcome {
            Ok(a) => format!("{:.1} W over {:.1} s, {}", a.watts, a.secs, r.path),
            Err(u) => format!("{}: {}", u.status(), u.detail()),
        };
        out.push_str(&format!(
            "  reader {:<12} {:<14} {said}\n",
            r.name,
            scope_name(r.scope)
        ));
    }
    for l in &c.ledgers {
        let said = match &l.outcome {
            Ok(a) => format!(
                "{:.1} W over {:.1} s ({})",
                a.watts,
                a.secs,
                l.path.display()
            ),
            Err(why) => why.clone(),
        };
        out.push_str(&format!("  slurmd {:<27} {said}\n", short(&l.plugin_type)));
    }
    for p in &c.pairs {
        let line = match (&p.verdict, p.plugin_joules, p.reader_joules, p.tolerance) {
            (Verdict::NotCompared(why), ..) => format!("not compared: {why}"),
            (verdict, Some(mine), Some(theirs), Some(t)) => format!(
                "{} {:.0} J, {} {:.0} J: {:+.0} J ({:+.2}%), {} (tolerance {}% + {} W{})",
                short(&p.plugin_type),
                mine,
                p.readers.join("+"),
                theirs,
                mine - theirs,
                p.difference_pct().unwrap_or(0.0),
                if *verdict == Verdict::Agree {
                    "agree"
                } else {
                    "DIFFER"
                },
                t.pct,
                t.floor_watts,
                if t.edge_secs > 0.0 {
                    format!(" + {} s of power", t.edge_secs)
                } else {
                    String::new()
                }
            ),
            _ => "not compared".into(),
        };
        out.push_str(&format!("  {:<33} {line}\n", short(&p.plugin_type)));
    }
    if let Some(s) = &c.share {
        out.push_str(&format!(
            "  RAPL covers {:.1}% of the node's wall power ({:.1} W from {} of {:.1} W from {}); \
             the rest is fans, disks, NICs, GPUs, power-supply losses...\n",
            s.pct(),
            s.rapl_watts,
            s.rapl_from,
            s.wall_watts,
            s.wall_from
        ));
    }
    out
}

fn short(plugin_type: &str) -> &str {
    plugin_type.rsplit('/').next().unwrap_or(plugin_type)
}

fn round(x: f64, places: i32) -> f64 {
    let k = 10f64.powi(places);
    (x * k).round() / k
}

pub fn json(c: &Comparison) -> Value {
    let readers: Vec<Value> = c
        .readers
        .iter()
        .map(|r| match &r.outcome {
            Ok(a) => json!({
                "reader": r.name, "scope": scope_name(r.scope), "status": "read",
                "path": r.path, "watts": round(a.watts, 2), "seconds": round(a.secs, 3),
                "detail": null,
            }),
            Err(u) => json!({
                "reader": r.name, "scope": scope_name(r.scope), "status": u.status(),
                "path": null, "watts": null, "seconds": null, "detail": u.detail(),
            }),
        })
        .collect();
    let ledgers: Vec<Value> = c
        .ledgers
        .iter()
        .map(|l| match &l.outcome {
            Ok(a) => json!({
                "plugin": l.plugin_type, "ledger": l.path, "watts": round(a.watts, 2),
                "seconds": round(a.secs, 3), "joules": round(a.watts * a.secs, 1), "detail": null,
            }),
            Err(why) => json!({
                "plugin": l.plugin_type, "ledger": l.path, "watts": null, "seconds": null,
                "joules": null, "detail": why,
            }),
        })
        .collect();
    let pairs: Vec<Value> = c
        .pairs
        .iter()
        .map(|p| {
            let (verdict, why) = match &p.verdict {
                Verdict::Agree => ("agree", None),
                Verdict::Differ => ("differ", None),
                Verdict::NotCompared(why) => ("not compared", Some(why.clone())),
            };
            json!({
                "plugin": p.plugin_type,
                "readers": p.readers,
                "plugin_joules": p.plugin_joules.map(|j| round(j, 1)),
                "reader_joules": p.reader_joules.map(|j| round(j, 1)),
                "difference_joules": p.difference_j().map(|j| round(j, 1)),
                "difference_pct": p.difference_pct().map(|x| round(x, 3)),
                "tolerance_pct": p.tolerance.map(|t| t.pct),
                "tolerance_floor_watts": p.tolerance.map(|t| t.floor_watts),
                "tolerance_edge_secs": p.tolerance.map(|t| t.edge_secs),
                "tolerance_why": p.tolerance.map(|t| t.why),
                "verdict": verdict,
                "why_not_compared": why,
            })
        })
        .collect();
    json!({
        "window_s": round(c.window_s, 3),
        "agrees": c.agrees(),
        "readers": readers,
        "slurmd": ledgers,
        "pairs": pairs,
        "rapl_share_of_wall": c.share.as_ref().map(|s| json!({
            "pct": round(s.pct(), 2),
            "rapl_watts": round(s.rapl_watts, 2),
            "rapl_from": s.rapl_from,
            "wall_watts": round(s.wall_watts, 2),
            "wall_from": s.wall_from,
        })),
    })
}
