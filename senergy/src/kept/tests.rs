use super::*;
use crate::record::StepRow;
use slurm_energy_logic::{IdleHeld, hostlist};

/// The Epilog's merge with nothing seen before: one write.
fn merge(comment: &str, node: &str, entry: &NodeRecord) -> Result<String, MergeError> {
    super::merge(comment, node, entry, &Seen::default())
}

fn node(joules: f64) -> NodeRecord {
    NodeRecord {
        joules,
        source: "rust_rapl".into(),
        parts: Some(BTreeMap::from([
            ("package".to_string(), joules * 0.75),
            ("dram".to_string(), joules * 0.25),
        ])),
        idle_held: Some(BTreeMap::from([("cpu".to_string(), 10.0)])),
    }
}

#[test]
fn the_sites_text_is_kept_around_our_segment() {
    let first = merge("reviewed by ops; ticket 42", "n1", &node(100.0)).expect("merged");
    assert!(first.starts_with("reviewed by ops; ticket 42 senergy={"));
    assert_eq!(read(&first).expect("a record").nodes["n1"], node(100.0));
    // text the site added after ours stays after it
    let later = format!("{first} checked");
    let second = merge(&later, "n2", &node(50.0)).expect("merged");
    assert!(second.starts_with("reviewed by ops; ticket 42 senergy={"));
    assert!(second.ends_with("} checked"));
    assert_eq!(second.matches(SEGMENT).count(), 1);
}

#[test]
fn two_nodes_are_merged_and_a_node_written_again_replaced() {
    let one = merge("", "n1", &node(100.0)).expect("merged");
    let two = merge(&one, "n2", &node(50.5)).expect("merged");
    let again = merge(&two, "n1", &node(120.0)).expect("merged");
    let record = read(&again).expect("a record");
    assert_eq!(record.nodes.len(), 2);
    assert_eq!(record.nodes["n1"].joules, 120.0);
    assert_eq!(record.joules(), 170.5);
    assert_eq!(
        record.summed(|n| n.parts.as_ref()).expect("a record"),
        BTreeMap::from([("dram".into(), 42.625), ("package".into(), 127.875)])
    );
    assert_eq!(
        record.summed(|n| n.idle_held.as_ref()).expect("a record")["cpu"],
        20.0
    );
    assert!(holds(&again, "n2", &node(50.5)));
    assert!(!holds(&one, "n2", &node(50.5)));
}

#[test]
fn a_node_without_parts_has_none_summed() {
    let bare = NodeRecord {
        joules: 5.0,
        ..NodeRecord::default()
    };
    let record = read(&merge("", "n1", &bare).expect("merged")).expect("a record");
    assert_eq!(record.summed(|n| n.parts.as_ref()), None);
    assert_eq!(
        merge("", "n1", &bare).expect("merged"),
        r#"senergy={"v":1,"nodes":{"n1":{"joules":5.0}}}"#
    );
}

#[test]
fn a_malformed_segment_is_left_as_the_sites_text() {
    for broken in [
        "senergy={\"v\":1,\"nodes\":{\"n1\":",
        "senergy=not json",
        "senergy={\"v\":9,\"nodes\":{}}",
        "senergy={\"v\":1,\"nodes\":{\"n1\":{\"joules\":\"many\"}}}",
    ] {
        assert_eq!(read(broken), None, "{broken}");
        let merged = merge(broken, "n2", &node(7.0)).expect("merged");
        assert!(merged.starts_with(broken), "{merged}");
        let record = read(&merged).expect("a record");
        assert_eq!(record.nodes.keys().collect::<Vec<_>>(), ["n2"]);
    }
}

#[test]
fn no_quote_or_backslash_reaches_slurmdbd() {
    assert_eq!(
        merge("it's ours", "n1", &node(1.0)),
        Err(MergeError::Unquotable)
    );
    assert_eq!(merge("a\\b", "n1", &node(1.0)), Err(MergeError::Unquotable));
    let odd = NodeRecord {
        source: "rapl \"pkg\" \\ 'x'\n".into(),
        ..node(1.0)
    };
    let merged = merge("", "n'1", &odd).expect("merged");
    assert!(!merged.contains(['\'', '\\', '\n']), "{merged}");
    assert_eq!(
        read(&merged).expect("a record").nodes["n_1"].source,
        "rapl _pkg_ _ _x__"
    );
}

#[test]
fn the_comment_stays_within_its_bound() {
    let huge_parts = NodeRecord {
        parts: Some((0..5000).map(|i| (format!("gpu{i}"), 1.5)).collect()),
        ..node(9.0)
    };
    // the parts do not fit: the node's energy alone is kept
    let merged = merge("", "n1", &huge_parts).expect("merged");
    assert!(merged.len() <= MAX_COMMENT);
    let kept = &read(&merged).expect("a record").nodes["n1"];
    assert_eq!(kept.joules, 9.0);
    assert!(kept.parts.is_none() && kept.idle_held.is_none());
    // nor does the energy: nothing is changed
    let full = "x".repeat(MAX_COMMENT - 10);
    assert!(matches!(
        merge(&full, "n1", &node(1.0)),
        Err(MergeError::TooLarge(n)) if n > MAX_COMMENT
    ));
}

/// A node of a big job: RAPL's parts, a GPU's, idle-held figures; `k` makes each differ.
fn big_node(k: usize) -> NodeRecord {
    let joules = 1000.0 + k as f64 * 1.125;
    NodeRecord {
        joules,
        source: "rust_rapl + rust_gpu".into(),
        parts: Some(BTreeMap::from([
            ("package".to_string(), joules * 0.5),
            ("dram".to_string(), joules * 0.125),
            ("gpu0".to_string(), joules * 0.25),
            ("rest".to_string(), joules * 0.125),
        ])),
        idle_held: Some(BTreeMap::from([("gpu".to_string(), 0.5 + k as f64 * 0.25)])),
    }
}

#[test]
fn a_job_of_hundreds_of_nodes_keeps_every_nodes_energy_and_its_exact_sums() {
    // 512 nodes: past the ~350 whose whole entries fit (the benchmark `record_at_scale`
    // merges 1 024 through slurmdbd; debug builds take seconds over these merges)
    const N: usize = 512;
    let names: Vec<String> = (0..N).map(|k| format!("nid{:06}", 1000 + k)).collect();
    // the nodes' Epilogs write in any order
    let mut order: Vec<usize> = (0..N).collect();
    order.sort_by_key(|k| (k * 389) % N);
    let mut comment = "reviewed by ops".to_string();
    for &k in &order {
        comment = merge(&comment, &names[k], &big_node(k)).expect("merged");
        assert!(comment.len() <= MAX_COMMENT, "{} bytes", comment.len());
    }
    assert!(comment.starts_with("reviewed by ops senergy={"));
    let record = read(&comment).expect("a record");
    // every node's energy, each its own
    assert_eq!(record.nodes.len(), N);
    for (k, name) in names.iter().enumerate() {
        assert_eq!(record.nodes[name].joules, big_node(k).joules, "{name}");
    }
    let truth = |pick: fn(&NodeRecord) -> &Option<BTreeMap<String, f64>>| {
        let mut sum = BTreeMap::<String, f64>::new();
        for k in 0..N {
            for (label, j) in pick(&big_node(k)).as_ref().expect("figures") {
                *sum.entry(label.clone()).or_default() += j;
            }
        }
        sum
    };
    // the job's parts and idle-held figures exact (to the millijoule the record keeps)
    for (got, want) in [
        (record.summed(|n| n.parts.as_ref()), truth(|n| &n.parts)),
        (
            record.summed(|n| n.idle_held.as_ref()),
            truth(|n| &n.idle_held),
        ),
    ] {
        let got = got.expect("summed");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        );
        for (label, j) in &want {
            assert!(
                (got[label] - j).abs() < 0.001 * N as f64,
                "{label}: {} for {j}",
                got[label]
            );
        }
    }
    // some nodes keep their parts in their entry, the others are named in the sums
    let folded = record.folded.as_ref().expect("folded");
    let named = hostlist::expand(&folded.nodes).expect("a host list");
    let full = record.nodes.values().filter(|n| n.parts.is_some()).count();
    assert_eq!(named.len() + full, N);
    assert!(full > 0 && !named.is_empty(), "{full} entries with parts");
    assert_eq!(folded.source, "rust_rapl + rust_gpu");
    // a node written again (its Epilog's retry) changes nothing but its own energy
    let again = merge(&comment, &named[0], &big_node(0)).expect("merged");
    let twice = read(&again).expect("a record");
    assert_eq!(
        twice.summed(|n| n.parts.as_ref()),
        record.summed(|n| n.parts.as_ref())
    );
    // a reader of an earlier release (no sums) still finds every node's energy
    #[derive(serde::Deserialize)]
    struct Earlier {
        nodes: BTreeMap<String, NodeRecord>,
    }
    let json = &comment[comment.find(SEGMENT).expect("ours") + SEGMENT.len()..];
    let earlier: Earlier = serde_json::from_str(json).expect("an earlier reader's");
    assert_eq!(earlier.nodes.len(), N);
}

#[test]
fn a_figure_is_final_once_sampled_after_the_job_was_last_seen() {
    let began = 1000.0;
    // no sample since the Epilog began: wait
    assert_eq!(ledgered(999.0, Some((990.0, 5.0)), began), Ledgered::Wait);
    // sampled since, the job still seen then: wait
    assert_eq!(ledgered(1001.0, Some((1001.0, 5.0)), began), Ledgered::Wait);
    // sampled since, the job not seen then: final
    assert_eq!(
        ledgered(1001.0, Some((1000.5, 5.0)), began),
        Ledgered::Final(5.0)
    );
    // sampled since, and no such job
    assert_eq!(ledgered(1001.0, None, began), Ledgered::Absent);
    // not sampled since: an absent job may yet be the ledger's lag
    assert_eq!(ledgered(999.0, None, began), Ledgered::Wait);
}

/// The record of a job whose nodes n1 and n2 kept `n1` and `n2` joules.
fn two_nodes(n1: f64, n2: f64) -> Record {
    read(
        &merge(
            &merge("", "n1", &node(n1)).expect("merged"),
            "n2",
            &node(n2),
        )
        .expect("merged"),
    )
    .expect("a record")
}

#[test]
fn accounting_changed_after_the_job_is_told() {
    let record = two_nodes(1000.0, 500.0);
    // an hour's job (1 500 J: 0.4 W): whole joules per node, a moment earlier, the same
    let hour = 3600;
    assert_eq!(tampered(Some(1498), &record, 2, hour, true), None);
    assert_eq!(tampered(Some(1501), &record, 2, hour, true), None);
    // rewritten to 1 J
    assert_eq!(
        tampered(Some(1), &record, 2, hour, true),
        Some(Tampered {
            accounting_j: 1,
            recorded_j: 1500.0,
            lower_bound: false,
        })
    );
    // raised, or lowered by more than the rounding and a sample's worth
    assert!(tampered(Some(3000), &record, 2, hour, true).is_some());
    assert!(tampered(Some(1480), &record, 2, hour, true).is_some());
    // a figure without the extern step's, no figure, a record of more nodes than the job
    // had: not compared
    assert_eq!(tampered(Some(1), &record, 2, hour, false), None);
    assert_eq!(tampered(None, &record, 2, hour, true), None);
    assert_eq!(tampered(Some(1), &record, 1, hour, true), None);
}

/// A record of some of the job's nodes (another node's Epilog failed) bounds accounting's
/// figure from below: the missing nodes can only add to what the recorded ones used. A
/// figure under it was lowered, and the record is billed as a lower bound; a figure over
/// it is the missing nodes' share, whatever it is. Before, such a record was not compared
/// at all: an owner's 1 J stood.
#[test]
fn a_record_of_some_nodes_bounds_accounting_from_below() {
    let record = two_nodes(1000.0, 500.0);
    let hour = 3600;
    // a 3-node job whose third node kept nothing, rewritten to 1 J
    assert_eq!(
        tampered(Some(1), &record, 3, hour, true),
        Some(Tampered {
            accounting_j: 1,
            recorded_j: 1500.0,
            lower_bound: true,
        })
    );
    // within the two nodes' rounding of theirs, or above (the third node's share): as is
    assert_eq!(tampered(Some(1495), &record, 3, hour, true), None);
    assert_eq!(tampered(Some(2250), &record, 3, hour, true), None);
    assert_eq!(tampered(Some(1_000_000), &record, 3, hour, true), None);
    // under it by more than the tolerance of the nodes recorded
    assert!(tampered(Some(1480), &record, 3, hour, true).is_some());
    // one node of 64 recorded still bounds it
    let one = read(&merge("", "n1", &node(1000.0)).expect("merged")).expect("a record");
    assert!(tampered(Some(1), &one, 64, hour, true).is_some_and(|t| t.lower_bound));
}

/// A job whose step failed at once lived a fraction of a second at 150 W and 80 W: its
/// ledger figure and its extern step's begin up to a sample apart, so they differ by
/// several joules (29 J in accounting for 34.4 J recorded on 26.05.3); a sample's worth at
/// its power is no sign of a change, a rewrite still is.
#[test]
fn a_job_of_a_fraction_of_a_second_differs_by_a_sample_not_a_change() {
    let record = two_nodes(22.803, 11.621);
    assert_eq!(tampered(Some(29), &record, 2, 0, true), None);
    assert!(tampered(Some(80), &record, 2, 0, true).is_some());
}

fn recorded_job(accounting_j: u64) -> JobRow {
    let comment = merge(
        &merge("ops note", "n1", &node(1000.0)).expect("merged"),
        "n2",
        &node(500.0),
    )
    .expect("merged");
    JobRow {
        job_id: 9,
        alloc_nodes: 2,
        elapsed_s: 3600,
        tres_alloc: format!("1=2,3={accounting_j}"),
        system_comment: comment,
        steps: vec![StepRow {
            step_id: EXTERN_STEP,
            ..StepRow::default()
        }],
        ..JobRow::default()
    }
}

#[test]
fn a_job_shows_its_record_or_says_it_has_none() {
    let kept_now = kept(&recorded_job(1500));
    assert!(kept_now.recorded);
    assert_eq!(
        (kept_now.nodes_recorded, kept_now.joules),
        (2, Some(1500.0))
    );
    assert_eq!(kept_now.tampered, None);
    assert_eq!(
        text(&kept_now, 2),
        [
            "kept with the job: 1500.0 J on 2 of 2 node(s); parts dram 375.0 J, package \
             1125.0 J; idle-held cpu 20.0 J"
        ]
    );
    // accounting's figure rewritten after the job (an owner's TRES edit, 25.11+)
    let edited = kept(&recorded_job(1));
    assert_eq!(
        text(&edited, 2)[1],
        "WARNING: accounting's energy (1 J) is not what the job's nodes kept at its end \
         (1500.0 J): accounting's figure was changed after the job"
    );
    // no record: said, never 0
    let none = kept(&JobRow {
        system_comment: "ops note".into(),
        ..recorded_job(1500)
    });
    assert!(!none.recorded && none.joules.is_none());
    assert_eq!(text(&none, 2), ["kept with the job: not recorded"]);
}

/// Two stacked plugins' breakdowns of one job add up on the node: RAPL's domains beside
/// each GPU, the GPU's idle-held beside the CPUs'; a figure neither knows stays absent.
#[test]
fn stacked_ledgers_breakdowns_add_up_on_the_node() {
    let mut entry = NodeRecord::default();
    let rapl = Breakdown {
        parts: BTreeMap::from([("package-0".into(), 300.0), ("dram-0".into(), 50.0)]),
        idle_held: IdleHeld {
            cpu: Some(40.0),
            ..IdleHeld::default()
        },
    };
    let gpu = Breakdown {
        parts: BTreeMap::from([("gpu0".into(), 900.0), ("gpu1".into(), 210.0)]),
        idle_held: IdleHeld {
            gpu: Some(210.0),
            ..IdleHeld::default()
        },
    };
    add_breakdown(&mut entry, &rapl);
    add_breakdown(&mut entry, &gpu);
    let parts = entry.parts.expect("parts");
    assert_eq!(parts.values().sum::<f64>(), 1460.0);
    assert_eq!(parts["gpu1"], 210.0);
    let idle = entry.idle_held.expect("idle-held");
    assert_eq!((idle["gpu"], idle["cpu"]), (210.0, 40.0));

    // a ledger without a breakdown (IPMI's whole node) leaves both absent
    let mut bare = NodeRecord::default();
    add_breakdown(&mut bare, &Breakdown::default());
    assert_eq!((bare.parts, bare.idle_held), (None, None));
}

/// A record as Princeton's jobstats writes it to AdminComment from slurmctld's epilog
/// (`JS1:` and the base64 of its gzipped JSON), one whose gzip is a whole number of base64
/// quads: no `=` ends it, so jobstats' decoder (Python's lenient `b64decode`) would read
/// on into any text after it and fail to gunzip (a third of its records are so).
const JOBSTATS: &str = "JS1:H4sIAAAAAAACA1WKSwqAIBQA7/LWLnxp+LlMSL0iSI3URYR37wMFbQaGmQOmtSSwo1sSMQhxoMsOCHizf5pkkGN2S+fJx20Hq1ttjJCtad6SZ09gkSODkmj4TuRKKIm6kbX+X8HrCQYxWcp8AAAA";

/// A job's row as accounting holds it, with these comments.
fn commented(admin: &str, system: &str) -> JobRow {
    JobRow {
        admin_comment: admin.into(),
        system_comment: system.into(),
        ..recorded_job(1500)
    }
}

/// jobstats wrote before the nodes' Epilogs: each Epilog writes the SystemComment only,
/// beside slurmctld's text there, and the AdminComment (jobstats', or the site's) is
/// never what is merged into; once a node's write landed, it writes nothing more.
#[test]
fn the_epilog_merges_into_the_system_comment_and_never_the_admin_comment() {
    let burst_buffer = "12/06/26 13:00:00 burst_buffer/lua: setup: slow";
    for admin in [JOBSTATS, "reviewed by ops; ticket 42", ""] {
        let mut row = commented(admin, burst_buffer);
        for (name, joules) in [("n1", 1000.0), ("n2", 500.0)] {
            let written = update(&row, name, &node(joules), &mut Seen::default())
                .expect("mergeable")
                .expect("a write");
            assert!(written.starts_with(&format!("{burst_buffer} {SEGMENT}")));
            assert!(!written.contains(admin) || admin.is_empty(), "{written}");
            row.system_comment = written;
            assert_eq!(
                update(&row, name, &node(joules), &mut Seen::default()),
                Ok(None)
            );
        }
        assert_eq!(row.admin_comment, admin);
        let kept = kept(&row);
        assert_eq!((kept.nodes_recorded, kept.joules), (2, Some(1500.0)));
    }
}

/// Two Epilogs read the record at once, and the second's write undoes the first's: the
/// first, reading it back, writes again; and a third that had read the first's entry puts
/// it back with its own, parts and all, never counting a folded node's parts twice.
#[test]
fn an_entry_another_write_undid_is_put_back_by_whoever_saw_it() {
    let mut row = commented("", "");
    let mut n1 = Seen::default();
    let mut n2 = Seen::default();
    let mut n3 = Seen::default();
    let base = row.clone();
    // n1 and n3 read the empty record; n1 writes; n3 reads n1's record
    row.system_comment = update(&base, "n1", &node(100.0), &mut n1)
        .expect("mergeable")
        .expect("a write");
    let read_by_n3 = row.clone();
    assert_eq!(
        update(&read_by_n3, "n3", &node(300.0), &mut n3).map(|w| w.is_some()),
        Ok(true)
    );
    // n2 had read the empty record: its write undoes n1's
    row.system_comment = update(&base, "n2", &node(200.0), &mut n2)
        .expect("mergeable")
        .expect("a write");
    assert!(!holds(&row.system_comment, "n1", &node(100.0)));
    // n3 writes on what it reads now, and puts n1's entry back
    row.system_comment = update(&row, "n3", &node(300.0), &mut n3)
        .expect("mergeable")
        .expect("a write");
    let record = read(&row.system_comment).expect("a record");
    assert_eq!(record.nodes.keys().collect::<Vec<_>>(), ["n1", "n2", "n3"]);
    assert_eq!(record.nodes["n1"], node(100.0));
    // n1, reading it back, finds its entry: nothing to write
    assert_eq!(update(&row, "n1", &node(100.0), &mut n1), Ok(None));
    // an entry seen bare whose parts went into sums now lost comes back bare
    let mut folded = Record {
        v: VERSION,
        ..Record::default()
    };
    folded.nodes.insert("n4".into(), node(400.0));
    folded.fold("n4");
    let mut seen = Seen::default();
    seen.absorb(&folded);
    let lost = seen.lost_from(&record);
    assert_eq!(
        lost,
        [(
            "n4".to_string(),
            NodeRecord {
                joules: 400.0,
                ..NodeRecord::default()
            }
        )]
    );
    assert!(seen.lost_from(&folded).is_empty());
}

/// jobstats wrote after the nodes' Epilogs, setting the whole AdminComment: the record,
/// in the SystemComment, is whole (on 26.05.3 jobstats' write after the Epilogs left the
/// job "not recorded" where the record was kept in AdminComment).
#[test]
fn jobstats_setting_the_whole_admin_comment_after_the_epilogs_leaves_the_record() {
    let recorded = recorded_job(1500);
    let after = commented(JOBSTATS, &recorded.system_comment);
    let kept = kept(&after);
    assert!(kept.recorded, "{kept:?}");
    assert_eq!((kept.nodes_recorded, kept.joules), (2, Some(1500.0)));
    assert_eq!(kept.tampered, None);
}

/// A job recorded by an earlier release (in AdminComment) is still read; a job whose nodes
/// were upgraded while it ran has nodes in each comment, read together, and a node in
/// both has its SystemComment figures.
#[test]
fn a_record_an_earlier_release_kept_in_admin_comment_is_still_read() {
    let before = merge(
        &merge("ops note", "n1", &node(1000.0)).expect("merged"),
        "n2",
        &node(400.0),
    )
    .expect("merged");
    let alone = kept(&commented(&before, ""));
    assert_eq!((alone.nodes_recorded, alone.joules), (2, Some(1400.0)));
    let now = merge("", "n2", &node(500.0)).expect("merged");
    let both = job_record(&commented(&before, &now)).expect("a record");
    assert_eq!(both.nodes["n1"].joules, 1000.0);
    assert_eq!(both.nodes["n2"].joules, 500.0);
    assert_eq!(job_record(&commented(JOBSTATS, "")), None);
}
