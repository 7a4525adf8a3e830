use super::*;

#[test]
fn the_file_key_wants_an_absolute_prom_file() {
    let parse = |v: &str| {
        let mut values = KeyValues::new();
        values.set(FILE_KEY, v);
        MetricsConfig::parse(&values)
    };
    assert_eq!(
        MetricsConfig::parse(&KeyValues::new()),
        Ok(MetricsConfig::default())
    );
    let ok = parse("/var/lib/node_exporter/slurm_energy.prom").expect("valid");
    assert_eq!(
        ok.path_for("rust_rapl", false, "n1"),
        Some(PathBuf::from("/var/lib/node_exporter/slurm_energy.prom"))
    );
    assert_eq!(
        ok.path_for("rust_gpu", true, "n1"),
        Some(PathBuf::from(
            "/var/lib/node_exporter/slurm_energy.rust_gpu.prom"
        ))
    );
    let per_node = parse("/shared/metrics/%n/energy_%h.prom").expect("valid");
    assert_eq!(
        per_node.path_for("rust_rapl", false, "n7"),
        Some(PathBuf::from(format!(
            "/shared/metrics/n7/energy_{}.prom",
            crate::source::host_name()
        )))
    );
    for bad in ["energy.prom", "/var/lib/energy.txt", "/var/lib/"] {
        let e = parse(bad).expect_err(bad);
        assert_eq!((e.key, e.value.as_str()), (FILE_KEY, bad));
    }
}
