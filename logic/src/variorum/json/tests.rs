use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

// 0.4.0, Intel (`git show v0.4.0:src/variorum/Intel/power_features.c`): "hostname",
// keys without units, GPU -1.0, node = sum of pkg + dram.
const V040_INTEL: &str = r#"{"hostname": "quartz12", "timestamp": 1614800000123456,
        "power_cpu_socket_0": 61.5, "power_mem_socket_0": 8.25, "power_gpu_socket_0": -1.0,
        "power_cpu_socket_1": 58.0, "power_mem_socket_1": 7.5, "power_gpu_socket_1": -1.0,
        "power_node": 135.25}"#;

// 0.4.1 - 0.7.0: the real Corona sample quoted in the reference (flux-power-monitor).
const FLAT_CORONA: &str = r#"{"host": "corona285", "timestamp": 1687898983502846, "power_node_watts": 384.0, "power_cpu_watts_socket_0": 85.0, "power_mem_watts_socket_0": 23.0, "power_gpu_watts_socket_0": 66.0, "power_cpu_watts_socket_1": 77.0, "power_mem_watts_socket_1": 23.0, "power_gpu_watts_socket_1": 66.0}"#;

// 0.5.0 - 0.7.0 AMD EPYC (epyc.c): mem and GPU -1.0, node = sum of sockets.
const FLAT_EPYC: &str = r#"{"host": "tioga3", "timestamp": 1660000000000000,
        "power_cpu_watts_socket_0": 180.0, "power_gpu_watts_socket_0": -1.0, "power_mem_watts_socket_0": -1.0,
        "power_cpu_watts_socket_1": 170.0, "power_gpu_watts_socket_1": -1.0, "power_mem_watts_socket_1": -1.0,
        "power_node_watts": 350.0}"#;

// 0.8.0 Intel, as json_dumps(JSON_INDENT(4)) writes it.
const NESTED_INTEL: &str = r#"{
    "quartz7": {
        "timestamp": 1711468800000001,
        "socket_0": {
            "power_cpu_watts": 95.5,
            "power_mem_watts": 12.0
        },
        "socket_1": {
            "power_cpu_watts": 90.0,
            "power_mem_watts": 11.5
        },
        "power_node_watts": 209.0
    }
}"#;

// 0.8.0 IBM Power9 + NVIDIA (lassen): node = PWRSYS, GPUs per socket as objects keyed
// by global index, not added to the node figure on IBM.
const NESTED_IBM_NVIDIA: &str = r#"{"lassen27": {"timestamp": 1711468800000002,
        "power_node_watts": 1100.0, "num_gpus_per_socket": 2,
        "socket_0": {"power_cpu_watts": 120.0, "power_mem_watts": 30.0,
                     "power_gpu_watts": {"GPU_0": 210.5, "GPU_1": 190.0}},
        "socket_1": {"power_cpu_watts": 110.0, "power_mem_watts": 28.0,
                     "power_gpu_watts": {"GPU_2": 200.0, "GPU_3": 195.5}}}}"#;

// 0.8.0 AMD EPYC: power_mem_watts -1.0.
const NESTED_EPYC: &str = r#"{"tioga9": {"timestamp": 1711468800000003,
        "socket_0": {"power_cpu_watts": 200.0, "power_mem_watts": -1.0},
        "socket_1": {"power_cpu_watts": 190.0, "power_mem_watts": -1.0},
        "power_node_watts": 390.0}}"#;

// 0.8.0 ARM Juno r2: GPU a bare number on socket 0, -1.0 on socket 1.
const NESTED_JUNO: &str = r#"{"juno": {"timestamp": 1711468800000004,
        "socket_0": {"power_cpu_watts": 1.25, "power_gpu_watts": 0.5},
        "socket_1": {"power_gpu_watts": -1.0, "power_cpu_watts": 0.75},
        "power_node_watts": 3.0, "num_gpus_per_socket": -1}}"#;

// 0.8.0 ARM Neoverse N1: "Socket_N" with only mem -1.0 (cpu/io lost to the lookup
// of "socket_0"), no node key. Nothing usable.
const NESTED_N1: &str = r#"{"n1": {"timestamp": 1711468800000005,
        "Socket_0": {"power_mem_watts": -1.0}}}"#;

// 0.8.0 GPU-only build: no power_node_watts.
const NESTED_GPU_ONLY: &str = r#"{"gpunode": {"timestamp": 1711468800000006,
        "num_gpus_per_socket": 2,
        "socket_0": {"power_gpu_watts": {"GPU_0": 70.0, "GPU_1": 72.0}},
        "socket_1": {"power_gpu_watts": {"GPU_2": 69.0, "GPU_3": 71.0}}}}"#;

// 0.8.0 on a CPU it has no power code for (Ice Lake-SP 06_6A): success, timestamp only.
const NESTED_UNSUPPORTED: &str = r#"{"icx1": {"timestamp": 1711468800000007}}"#;

#[test]
fn release_0_4_0_flat_without_units() {
    let p = parse(V040_INTEL).expect("0.4.0");
    assert_eq!(p.schema, Schema::Flat040);
    assert_eq!(p.source, NodeSource::Reported);
    assert!(close(p.node_watts, 135.25));
    assert_eq!(p.host.as_deref(), Some("quartz12"));
    assert_eq!(p.timestamp_us, Some(1614800000123456));
    assert_eq!(p.sockets.len(), 2);
    assert_eq!(p.sockets[0].cpu_watts, Some(61.5));
    assert_eq!(p.sockets[0].mem_watts, Some(8.25));
    assert_eq!(
        p.sockets[0].gpu_watts, None,
        "-1.0 is not measurable, not 0"
    );
}

#[test]
fn releases_0_4_1_to_0_7_flat() {
    let p = parse(FLAT_CORONA).expect("corona");
    assert_eq!(p.schema, Schema::Flat);
    assert!(close(p.node_watts, 384.0));
    assert_eq!(p.host.as_deref(), Some("corona285"));
    assert_eq!(p.sockets[1].gpu_watts, Some(66.0));
    assert_eq!(p.sockets[1].total(), Some(166.0));

    let p = parse(FLAT_EPYC).expect("epyc");
    assert!(close(p.node_watts, 350.0));
    assert_eq!(p.sockets[0].mem_watts, None);
    assert_eq!(p.sockets[0].gpu_watts, None);
}

#[test]
fn release_0_8_nested_per_platform() {
    let p = parse(NESTED_INTEL).expect("intel");
    assert_eq!(p.schema, Schema::Nested);
    assert_eq!(p.host.as_deref(), Some("quartz7"));
    assert!(close(p.node_watts, 209.0));
    assert_eq!(p.sockets[1].mem_watts, Some(11.5));

    let p = parse(NESTED_IBM_NVIDIA).expect("ibm+nvidia");
    assert!(close(p.node_watts, 1100.0), "PWRSYS, GPUs not added again");
    assert!(close(p.sockets[0].gpu_watts.expect("gpu"), 400.5));
    assert_eq!(
        p.sockets[1].gpus,
        vec![
            DevicePower {
                name: "GPU_2".into(),
                watts: 200.0
            },
            DevicePower {
                name: "GPU_3".into(),
                watts: 195.5
            }
        ]
    );

    let p = parse(NESTED_EPYC).expect("epyc");
    assert!(close(p.node_watts, 390.0));
    assert_eq!(p.sockets[0].mem_watts, None);

    let p = parse(NESTED_JUNO).expect("juno");
    assert!(close(p.node_watts, 3.0));
    assert_eq!(p.sockets[0].gpu_watts, Some(0.5));
    assert_eq!(p.sockets[1].gpu_watts, None);
    assert_eq!(p.sockets[1].cpu_watts, Some(0.75));
}

#[test]
fn no_node_key_sums_the_components() {
    let p = parse(NESTED_GPU_ONLY).expect("gpu only");
    assert_eq!(p.source, NodeSource::SumOfComponents);
    assert!(close(p.node_watts, 282.0));
    assert_eq!(p.sockets[1].gpus.len(), 2);
}

#[test]
fn nothing_usable_is_an_error_not_zero() {
    assert_eq!(parse(NESTED_N1), Err(JsonError::NoPower));
    assert_eq!(parse(NESTED_UNSUPPORTED), Err(JsonError::NoPower));
    assert_eq!(parse("{}"), Err(JsonError::NoPower));
    // Intel's first call after loading: zeros everywhere
    let first = r#"{"h": {"timestamp": 1, "power_node_watts": 0.0,
            "socket_0": {"power_cpu_watts": 0.0, "power_mem_watts": 0.0}}}"#;
    assert_eq!(parse(first), Err(JsonError::ZeroPower));
    let all_minus_one = r#"{"host": "h", "timestamp": 1, "power_node_watts": -1.0,
            "power_cpu_watts_socket_0": -1.0}"#;
    assert_eq!(parse(all_minus_one), Err(JsonError::NoPower));
}

#[test]
fn unusable_node_figure_falls_back_to_the_sum() {
    let doc = r#"{"host": "h", "timestamp": 1, "power_node_watts": -1.0,
            "power_cpu_watts_socket_0": 50.0, "power_mem_watts_socket_0": 5.0,
            "power_gpu_watts_socket_0": -1.0, "power_cpu_watts_socket_1": 45.0}"#;
    let p = parse(doc).expect("sum");
    assert_eq!(p.source, NodeSource::SumOfComponents);
    assert!(close(p.node_watts, 100.0));
    let zero_node = r#"{"h": {"power_node_watts": 0, "socket_0": {"power_cpu_watts": 7}}}"#;
    let p = parse(zero_node).expect("zero node");
    assert_eq!(p.reported_node_watts, Some(0.0));
    assert!(close(p.node_watts, 7.0));
}

#[test]
fn socket_keys_in_any_case_and_merged() {
    let doc = r#"{"h": {"Socket_0": {"power_mem_watts": -1.0, "power_cpu_watts": 10.0},
            "socket_0": {"power_cpu_watts": 99.0, "power_io_watts": 2.0},
            "SOCKET_2": {"POWER_CPU_WATTS": 5.0}}}"#;
    let p = parse(doc).expect("cases");
    assert_eq!(p.sockets.len(), 3);
    assert_eq!(p.sockets[0].io_watts, Some(2.0));
    assert_eq!(p.sockets[1], SocketPower::default());
    assert!(close(p.node_watts, 10.0 + 2.0 + 5.0) || close(p.node_watts, 99.0 + 2.0 + 5.0));
}

#[test]
fn apu_objects_of_the_dev_branch() {
    let doc = r#"{"tuo1": {"timestamp": 5, "socket_0": {"power_apu_watts":
            {"APU_0": 300.0, "APU_1": "n/a"}}, "socket_1": {"power_apu_watts": 280}}}"#;
    let p = parse(doc).expect("apu");
    assert!(close(p.node_watts, 580.0));
    assert_eq!(p.sockets[0].apus.len(), 1);
}

#[test]
fn malformed_documents_are_errors() {
    assert!(matches!(parse(""), Err(JsonError::Syntax(_))));
    assert!(matches!(parse("{\"h\": "), Err(JsonError::Syntax(_))));
    assert_eq!(parse("[1, 2]"), Err(JsonError::NotAnObject("an array")));
    assert_eq!(parse("384.0"), Err(JsonError::NotAnObject("a number")));
    let two = r#"{"a": {"power_node_watts": 1}, "b": {"power_node_watts": 2}}"#;
    assert!(matches!(parse(two), Err(JsonError::SeveralHosts(_))));
    let huge = r#"{"h": {"socket_4000000000": {"power_cpu_watts": 1}}}"#;
    assert_eq!(parse(huge), Err(JsonError::NoPower));
    let strings = r#"{"host": "h", "power_node_watts": "384"}"#;
    assert_eq!(parse(strings), Err(JsonError::NoPower));
    let overflow = r#"{"host": "h", "power_cpu_watts_socket_0": 1.7e308,
            "power_mem_watts_socket_0": 1.7e308}"#;
    assert_eq!(parse(overflow), Err(JsonError::NoPower));
}

#[test]
fn the_power_domain_info_json_is_not_power() {
    // variorum_get_node_power_domain_info_json (0.8.0): must not be mistaken for power
    let doc = r#"{"q": {"timestamp": 1, "control": {"power_cpu": {"min": 0, "max": 150,
            "units": "Watts"}}, "unsupported": ["power_node"],
            "measurement": {"power_cpu": {"units": "Watts"}}}}"#;
    assert_eq!(parse(doc), Err(JsonError::NoPower));
}

mod properties {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            prop_oneof![Just(-1.0f64), Just(0.0), 0.0f64..2000.0, Just(f64::MAX)]
                .prop_map(|f| json!(f)),
            ".{0,12}".prop_map(Value::String),
        ];
        let key = prop_oneof![
            Just("power_node_watts".to_string()),
            Just("power_node".to_string()),
            Just("timestamp".to_string()),
            Just("host".to_string()),
            (0usize..3).prop_map(|n| format!("socket_{n}")),
            (0usize..3).prop_map(|n| format!("Socket_{n}")),
            (0usize..3).prop_map(|n| format!("power_cpu_watts_socket_{n}")),
            (0usize..3).prop_map(|n| format!("power_gpu_socket_{n}")),
            Just("power_cpu_watts".to_string()),
            Just("power_gpu_watts".to_string()),
            Just("GPU_0".to_string()),
            "[a-zA-Z_0-9]{0,10}",
        ];
        leaf.prop_recursive(4, 64, 8, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(key.clone(), inner, 0..8)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// One measurement as a generator writes it, and what it must count for.
    #[derive(Debug, Clone, Copy)]
    enum Reading {
        Absent,
        Unmeasurable,
        Watts(f64),
    }

    impl Reading {
        fn usable(self) -> Option<f64> {
            match self {
                Reading::Watts(w) => Some(w),
                _ => None,
            }
        }
    }

    fn reading() -> impl Strategy<Value = Reading> {
        prop_oneof![
            1 => Just(Reading::Absent),
            1 => Just(Reading::Unmeasurable),
            1 => Just(Reading::Watts(0.0)),
            4 => (0.0f64..1500.0).prop_map(Reading::Watts),
        ]
    }

    #[derive(Debug, Clone)]
    struct Socket {
        cpu: Reading,
        mem: Reading,
        /// Per-GPU readings; one element and `gpu_as_number` means a bare number.
        gpus: Vec<Reading>,
        gpu_as_number: bool,
        upper_case: bool,
    }

    fn socket() -> impl Strategy<Value = Socket> {
        (
            reading(),
            reading(),
            prop::collection::vec(reading(), 1..4),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(cpu, mem, gpus, gpu_as_number, upper_case)| Socket {
                cpu,
                mem,
                gpus,
                gpu_as_number,
                upper_case,
            })
    }

    fn put(map: &mut Map<String, Value>, key: String, r: Reading) {
        match r {
            Reading::Absent => {}
            Reading::Unmeasurable => {
                map.insert(key, json!(-1.0));
            }
            Reading::Watts(w) => {
                map.insert(key, json!(w));
            }
        }
    }

    /// The document a release of `schema` writes for these readings, and the node
    /// power the parser must find (None: it must refuse).
    fn document(
        schema: Schema,
        node: Reading,
        sockets: &[Socket],
        host: &str,
    ) -> (Value, Option<f64>) {
        let mut sum: Option<f64> = None;
        let mut add = |r: Reading| {
            if let Some(w) = r.usable() {
                sum = Some(sum.unwrap_or(0.0) + w);
            }
        };
        let mut top = Map::new();
        match schema {
            Schema::Flat040 | Schema::Flat => {
                let (unit, host_key, node_key) = if schema == Schema::Flat040 {
                    ("", "hostname", "power_node")
                } else {
                    ("_watts", "host", "power_node_watts")
                };
                top.insert(host_key.into(), json!(host));
                top.insert("timestamp".into(), json!(1_700_000_000_000_000u64));
                for (i, s) in sockets.iter().enumerate() {
                    // the flat releases had one GPU value per socket
                    let gpu = s.gpus[0];
                    for (name, r) in [("cpu", s.cpu), ("mem", s.mem), ("gpu", gpu)] {
                        put(&mut top, format!("power_{name}{unit}_socket_{i}"), r);
                        add(r);
                    }
                }
                put(&mut top, node_key.into(), node);
            }
            Schema::Nested => {
                let mut inner = Map::new();
                inner.insert("timestamp".into(), json!(1_700_000_000_000_000u64));
                inner.insert("num_gpus_per_socket".into(), json!(2));
                let mut gpu_index = 0;
                for (i, s) in sockets.iter().enumerate() {
                    let mut obj = Map::new();
                    put(&mut obj, "power_cpu_watts".into(), s.cpu);
                    put(&mut obj, "power_mem_watts".into(), s.mem);
                    add(s.cpu);
                    add(s.mem);
                    if s.gpu_as_number {
                        put(&mut obj, "power_gpu_watts".into(), s.gpus[0]);
                        add(s.gpus[0]);
                    } else {
                        let mut gpus = Map::new();
                        for g in &s.gpus {
                            put(&mut gpus, format!("GPU_{gpu_index}"), *g);
                            gpu_index += 1;
                            add(*g);
                        }
                        obj.insert("power_gpu_watts".into(), Value::Object(gpus));
                    }
                    let key = if s.upper_case { "Socket" } else { "socket" };
                    inner.insert(format!("{key}_{i}"), Value::Object(obj));
                }
                put(&mut inner, "power_node_watts".into(), node);
                top.insert(host.into(), Value::Object(inner));
            }
        }
        let expected = match node {
            Reading::Watts(w) if w > 0.0 => Some(w),
            _ => sum.filter(|s| *s > 0.0),
        };
        (Value::Object(top), expected)
    }

    proptest! {
        #[test]
        fn never_panics_on_any_string(s in "\\PC{0,200}") {
            let _ = parse(&s);
        }

        #[test]
        fn never_panics_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }

        #[test]
        fn never_panics_on_any_json(v in any_json()) {
            if let Ok(p) = parse_value(&v) {
                prop_assert!(p.node_watts.is_finite() && p.node_watts > 0.0);
                prop_assert!(p.sockets.len() <= MAX_SOCKETS);
            }
            let _ = parse(&v.to_string());
        }

        #[test]
        fn generated_documents_give_the_right_node_power(
            schema in prop_oneof![Just(Schema::Flat040), Just(Schema::Flat), Just(Schema::Nested)],
            node in reading(),
            sockets in prop::collection::vec(socket(), 1..6),
            host in "[a-z][a-z0-9-]{0,15}",
            pretty in any::<bool>(),
        ) {
            let (doc, expected) = document(schema, node, &sockets, &host);
            let text = if pretty {
                serde_json::to_string_pretty(&doc).expect("serialize")
            } else {
                doc.to_string()
            };
            match (parse(&text), expected) {
                (Ok(p), Some(w)) => {
                    prop_assert!(close(p.node_watts, w), "{} != {w} in {text}", p.node_watts);
                    prop_assert_eq!(p.host.as_deref(), Some(host.as_str()));
                    if sockets.iter().any(|s| {
                        [s.cpu, s.mem].into_iter().chain(s.gpus.iter().copied())
                            .any(|r| !matches!(r, Reading::Absent))
                    }) {
                        prop_assert_eq!(p.schema, schema);
                    }
                }
                (Err(e), None) => {
                    prop_assert!(matches!(e, JsonError::NoPower | JsonError::ZeroPower), "{e}");
                }
                (got, want) => prop_assert!(false, "got {got:?}, want {want:?} for {text}"),
            }
        }
    }
}
