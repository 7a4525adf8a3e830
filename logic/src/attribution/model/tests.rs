use super::*;
use proptest::prelude::*;

/// [`super::split_node`] with no unowned CPU time: the jobs' parts.
fn split_node(joules: f64, secs: f64, static_watts: f64, jobs: &[JobUse]) -> Vec<f64> {
    super::split_node(joules, secs, static_watts, jobs, 0.0).0
}

/// [`super::split_interval`] with no unowned CPU time: the jobs' parts.
fn split_interval(interval: &Interval, jobs: &[JobUse]) -> Vec<f64> {
    super::split_interval(interval, jobs, 0.0).0
}

fn job(cpus: u32, memory: Option<u64>, cpu_secs: f64) -> JobUse {
    JobUse {
        cpus,
        memory,
        cpu_secs,
        arrived: 0.0,
    }
}

fn interval(joules: f64, secs: f64, prior_watts: Option<f64>) -> Interval {
    Interval {
        joules,
        secs,
        static_watts: 100.0,
        prior_watts,
    }
}

#[test]
fn a_job_arriving_in_an_interval_pays_from_its_arrival() {
    // 100 W idle for 0.4 s, then the job at 300 W for 0.6 s: 220 J
    let new = JobUse {
        arrived: 0.4,
        ..job(1, None, 0.6)
    };
    let shares = split_interval(&interval(220.0, 1.0, Some(100.0)), &[new]);
    assert!((shares[0] - 180.0).abs() < 1e-9, "{shares:?}");
    // without the power before, the interval's energy is spread over time
    let shares = split_interval(&interval(220.0, 1.0, None), &[new]);
    assert!((shares[0] - 132.0).abs() < 1e-9, "{shares:?}");
    // a job there all along keeps the piece before the arrival and shares the rest:
    // 40 J alone, then 180 J over 0.6 s: static 60 J 1:1, dynamic 120 J by CPU time
    // (0.6 s of the old job's 1 s spread over its interval, the new one's 0.6 s)
    let old = job(1, None, 1.0);
    let shares = split_interval(&interval(220.0, 1.0, Some(100.0)), &[old, new]);
    assert!(
        (shares[0] - (40.0 + 30.0 + 60.0)).abs() < 1e-9,
        "{shares:?}"
    );
    assert!((shares[1] - (30.0 + 60.0)).abs() < 1e-9, "{shares:?}");
    // with nobody arriving, the interval is split whole
    assert_eq!(
        split_interval(
            &interval(300.0, 1.0, Some(100.0)),
            &[old, job(1, None, 0.0)]
        ),
        split_node(300.0, 1.0, 100.0, &[old, job(1, None, 0.0)])
    );
}

#[test]
fn a_job_alone_gets_the_node() {
    let shares = split_node(350.0, 1.0, 100.0, &[job(4, None, 0.2)]);
    assert_eq!(shares, vec![350.0]);
    let idle = split_node(50.0, 1.0, 100.0, &[job(4, Some(1 << 30), 0.0)]);
    assert_eq!(idle, vec![50.0]);
}

#[test]
fn the_busy_job_pays_more_and_the_idle_one_still_pays_for_what_it_holds() {
    // 2 equal jobs, 1 s at 300 W with 100 W static: the busy one used the CPU
    let shares = split_node(300.0, 1.0, 100.0, &[job(1, None, 1.0), job(1, None, 0.0)]);
    assert_eq!(shares, vec![50.0 + 200.0, 50.0]);
}

#[test]
fn memory_counts_half_when_every_job_has_a_limit() {
    let gib = 1u64 << 30;
    // static only (dE below the static power): cpus 3:1, memory 1:3 -> 1/2 each
    let shares = split_node(
        80.0,
        1.0,
        100.0,
        &[job(3, Some(gib), 1.0), job(1, Some(3 * gib), 0.0)],
    );
    assert_eq!(shares, vec![40.0, 40.0]);
    // one job without a limit: CPUs only
    let shares = split_node(
        80.0,
        1.0,
        100.0,
        &[job(3, Some(gib), 1.0), job(1, None, 0.0)],
    );
    assert_eq!(shares, vec![60.0, 20.0]);
}

/// Issue 53: CPU time no job present used (an owner's process left in a leftover
/// directory after their last job ended) takes its part of the dynamic energy, charged
/// to no job: a sleeping neighbour pays the static part it holds and its own use only.
#[test]
fn cpu_time_of_no_job_takes_its_dynamic_part_to_no_job() {
    // 1 s at 300 W, 100 W static: the neighbour sleeps, 1 CPU-s burnt by no job
    let (alone, nobody) = super::split_node(300.0, 1.0, 100.0, &[job(1, None, 0.0)], 1.0);
    assert_eq!((alone, nobody), (vec![100.0], 200.0));
    // a busy and an idle job beside it: the dynamic 200 J by 1 : 0 : 1
    let (pair, nobody) = super::split_node(
        300.0,
        1.0,
        100.0,
        &[job(1, None, 1.0), job(1, None, 0.0)],
        1.0,
    );
    assert_eq!((pair, nobody), (vec![50.0 + 100.0, 50.0], 100.0));
    // no job: the dynamic part is no job's, the static part waits
    assert_eq!(
        super::split_node(300.0, 1.0, 100.0, &[], 0.5),
        (vec![], 200.0)
    );
    assert_eq!(
        super::split_node(300.0, 1.0, 100.0, &[], 0.0),
        (vec![], 0.0)
    );
    // over an interval with an arrival, the unowned time is spread evenly: a job
    // there all along (sleeping) and one arriving at 0.5 s (sleeping), 1 CPU-s unowned,
    // 300 W throughout: 300 J in two pieces of 150 J, each 100 J dynamic to no job
    let late = JobUse {
        arrived: 0.5,
        ..job(1, None, 0.0)
    };
    let (shares, nobody) = super::split_interval(
        &interval(300.0, 1.0, Some(300.0)),
        &[job(1, None, 0.0), late],
        1.0,
    );
    assert!((nobody - 200.0).abs() < 1e-9, "{nobody}");
    assert!((shares[0] - (50.0 + 25.0)).abs() < 1e-9, "{shares:?}");
    assert!((shares[1] - 25.0).abs() < 1e-9, "{shares:?}");
}

#[test]
fn when_nobody_used_cpu_the_dynamic_part_follows_what_is_held() {
    let shares = split_node(400.0, 1.0, 100.0, &[job(3, None, 0.0), job(1, None, 0.0)]);
    assert_eq!(shares, vec![300.0, 100.0]);
    assert!(split_node(400.0, 1.0, 100.0, &[]).is_empty());
}

/// Two jobs with 2 of a GPU's 4 shards each, one busy (80% SM) and one idle: the
/// GPU's 50 W static power by shares, the rest by use; together exactly the GPU's.
#[test]
fn a_shared_gpu_is_split_by_shares_and_use() {
    let (busy, idle) = (
        DeviceUse {
            shares: Some(2.0),
            busy: 80.0,
        },
        DeviceUse {
            shares: Some(2.0),
            busy: 0.0,
        },
    );
    // 10 s at 250 W: 500 J static, 2000 J dynamic
    let split = split_device(2500.0, 10.0, 50.0, &[busy, idle]);
    assert_eq!(split, vec![2250.0, 250.0]);
    // by shares where no use is reported; a holder alone gets it all
    let no_use = DeviceUse { busy: 0.0, ..busy };
    let three = DeviceUse {
        shares: Some(6.0),
        busy: 0.0,
    };
    assert_eq!(
        split_device(2500.0, 10.0, 50.0, &[no_use, three]),
        vec![625.0, 1875.0]
    );
    assert_eq!(split_device(2500.0, 10.0, 50.0, &[idle]), vec![2500.0]);
    assert!(split_device(2500.0, 10.0, 50.0, &[]).is_empty());
}

/// A GPU held whole by one job and used beside it by a job it was not given (20% and
/// 60% SM) and by a process of no job (20%): 10 s at 250 W with 50 W static. The
/// holder pays the static part and its own use only; the other job its use; the no-job
/// use is nobody's. Held by nobody, the static part is nobody's too.
#[test]
fn a_gpu_is_paid_by_everyone_who_used_it() {
    let holder = DeviceUse {
        shares: Some(1.0),
        busy: 20.0,
    };
    let intruder = DeviceUse {
        shares: None,
        busy: 60.0,
    };
    let nobody = DeviceUse {
        shares: None,
        busy: 20.0,
    };
    // 500 J static to the holder, 2000 J dynamic by 20 : 60 (: 20)
    assert_eq!(
        split_device(2500.0, 10.0, 50.0, &[holder, intruder]),
        vec![1000.0, 1500.0]
    );
    assert_eq!(
        split_device(2500.0, 10.0, 50.0, &[holder, intruder, nobody]),
        vec![900.0, 1200.0, 400.0]
    );
    assert_eq!(
        split_device(2500.0, 10.0, 50.0, &[intruder, nobody]),
        vec![1500.0, 500.0]
    );
    // nobody used it: the holder's by shares, and held by nobody, nobody's
    let idle = DeviceUse {
        busy: 0.0,
        ..intruder
    };
    assert_eq!(
        split_device(
            2500.0,
            10.0,
            50.0,
            &[
                DeviceUse {
                    busy: 0.0,
                    ..holder
                },
                idle
            ]
        ),
        vec![2500.0, 0.0]
    );
    assert_eq!(split_device(2500.0, 10.0, 50.0, &[idle]), vec![0.0]);
}

#[test]
fn the_extern_step_is_the_job_and_the_others_split_it() {
    let steps = [
        StepUse {
            is_extern: true,
            cpu_secs: 0.0,
        },
        StepUse {
            is_extern: false,
            cpu_secs: 0.1,
        },
        StepUse {
            is_extern: false,
            cpu_secs: 0.3,
        },
    ];
    let shares = split_job(100.0, &steps);
    assert_eq!(shares[0], 100.0);
    assert!(
        (shares[1] - 25.0).abs() < 1e-9 && (shares[2] - 75.0).abs() < 1e-9,
        "{shares:?}"
    );
    let idle = [
        steps[0],
        StepUse {
            cpu_secs: 0.0,
            ..steps[1]
        },
        StepUse {
            cpu_secs: 0.0,
            ..steps[2]
        },
    ];
    assert_eq!(split_job(100.0, &idle), vec![100.0, 50.0, 50.0]);
}

proptest! {
    /// Invariant b: whatever the mix, the jobs together get the node's energy.
    #[test]
    fn the_jobs_together_get_the_node(
        joules in 0.0f64..10_000.0,
        secs in 0.01f64..100.0,
        static_watts in 0.0f64..1000.0,
        jobs in prop::collection::vec(
            (0u32..128, prop::option::of(0u64..1 << 40), 0.0f64..100.0), 1..20),
    ) {
        let jobs: Vec<JobUse> = jobs.into_iter().map(|(c, m, u)| job(c, m, u)).collect();
        let shares = split_node(joules, secs, static_watts, &jobs);
        let total: f64 = shares.iter().sum();
        prop_assert!((total - joules).abs() <= 1e-9 * joules.max(1.0), "{total} vs {joules}");
        prop_assert!(shares.iter().all(|s| *s >= 0.0));
    }

    /// With arrivals, the jobs get the interval less the piece before the first job
    /// came (nobody's), never more, never less than zero each.
    #[test]
    fn arrivals_never_charge_more_than_the_interval(
        joules in 0.0f64..10_000.0,
        secs in 0.01f64..100.0,
        prior in prop::option::of(0.0f64..1000.0),
        jobs in prop::collection::vec((1u32..128, 0.0f64..100.0, 0.0f64..1.2), 1..10),
    ) {
        let jobs: Vec<JobUse> = jobs
            .into_iter()
            .map(|(c, u, a)| JobUse { arrived: a * secs, ..job(c, None, u) })
            .collect();
        let interval = Interval { joules, secs, static_watts: 100.0, prior_watts: prior };
        let shares = split_interval(&interval, &jobs);
        let total: f64 = shares.iter().sum();
        prop_assert!(total <= joules * (1.0 + 1e-9) + 1e-9, "{total} vs {joules}");
        prop_assert!(shares.iter().all(|s| *s >= 0.0));
        if jobs.iter().any(|j| j.arrived <= 0.0) {
            prop_assert!((total - joules).abs() <= 1e-9 * joules.max(1.0), "{total} vs {joules}");
        }
    }

    /// With CPU time of no job, the jobs and no job together get what the jobs alone
    /// would (all of it with a job there from the start), each part at least zero, and
    /// no job's part never more than the dynamic energy.
    #[test]
    fn unowned_cpu_time_moves_energy_to_no_job_never_creates_any(
        joules in 0.0f64..10_000.0,
        secs in 0.01f64..100.0,
        unowned in 0.0f64..100.0,
        jobs in prop::collection::vec((1u32..128, 0.0f64..100.0, 0.0f64..1.2), 0..10),
    ) {
        let jobs: Vec<JobUse> = jobs
            .into_iter()
            .map(|(c, u, a)| JobUse { arrived: a * secs, ..job(c, None, u) })
            .collect();
        let interval = Interval { joules, secs, static_watts: 100.0, prior_watts: None };
        let (shares, nobody) = super::split_interval(&interval, &jobs, unowned);
        let total: f64 = shares.iter().sum::<f64>() + nobody;
        prop_assert!(total <= joules * (1.0 + 1e-9) + 1e-9, "{total} vs {joules}");
        prop_assert!(shares.iter().all(|s| *s >= 0.0) && nobody >= 0.0);
        prop_assert!(nobody <= (joules - (100.0 * secs).min(joules)) * (1.0 + 1e-9) + 1e-9);
        if jobs.iter().any(|j| j.arrived <= 0.0) {
            prop_assert!((total - joules).abs() <= 1e-9 * joules.max(1.0), "{total} vs {joules}");
        }
    }

    /// Invariant c: of two equal allocations the busier pays more, the idle one pays
    /// its half of the static part.
    #[test]
    fn the_busier_of_two_equal_jobs_pays_more(
        joules in 1.0f64..10_000.0,
        static_watts in 1.0f64..1000.0,
        busy in 0.01f64..10.0,
    ) {
        let shares = split_node(joules, 1.0, static_watts, &[job(2, None, busy), job(2, None, 0.0)]);
        prop_assert!(shares[0] >= shares[1]);
        let static_j = joules.min(static_watts);
        prop_assert!((shares[1] - static_j / 2.0).abs() <= 1e-9 * joules);
    }
}
