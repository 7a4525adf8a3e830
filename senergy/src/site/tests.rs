use super::*;

#[test]
fn static_intensity_and_price() {
    let t =
        Tariff::new(Some(350.0), None, Some(0.25), Some("EUR".into())).expect("valid in this test");
    // 7.2 MJ = 2 kWh
    assert_eq!(t.emissions_g(7.2e6, 0.0, 100.0), Some(700.0));
    assert_eq!(t.cost(7.2e6), Some(0.5));
    assert!(matches!(
        Tariff::new(Some(1.4e307), None, None, None),
        Err(TariffError::OutOfRange { .. })
    ));
    assert!(
        Tariff::new(
            Some(crate::carbon::MAX_FIGURE),
            None,
            Some(crate::carbon::MAX_FIGURE),
            None
        )
        .is_ok()
    );
    let none = Tariff::default();
    assert_eq!(none.emissions_g(7.2e6, 0.0, 100.0), None);
    assert_eq!(none.cost(7.2e6), None);
}

#[test]
fn site_file_keys() {
    let f = SiteFile::parse(
        Path::new("s.conf"),
        "carbon_intensity = 350\nprice_per_kwh = 0.25\ncurrency = \"EUR\"\n",
    )
    .expect("valid in this test");
    assert_eq!(f.carbon_intensity, Some(350.0));
    assert_eq!(f.currency.as_deref(), Some("EUR"));
    let e = SiteFile::parse(Path::new("s.conf"), "carbon_intensty = 3\n")
        .expect_err("invalid in this test");
    assert!(e.to_string().contains("carbon_intensty"), "{e}");
    let e = SiteFile::parse(Path::new("s.conf"), "price_per_kwh = \"cheap\"\n")
        .expect_err("invalid in this test");
    assert!(e.to_string().contains("price_per_kwh"), "{e}");
    assert!(Tariff::new(Some(-1.0), None, None, None).is_err());
    assert!(Tariff::new(None, None, Some(f64::NAN), None).is_err());
}

/// `mail_summaries`: 1 to 64 (slurmctld's mail threads); anything else names the key and
/// its value.
#[test]
fn mail_summaries_is_a_count_of_mail_threads() {
    let parse = |text: &str| SiteFile::parse(Path::new("s.conf"), text);
    assert_eq!(
        parse("mail_summaries = 4\n").map(|f| f.mail_summaries).ok(),
        Some(Some(4))
    );
    assert_eq!(parse("").map(|f| f.mail_summaries).ok(), Some(None));
    assert!(parse("mail_summaries = 64\n").is_ok());
    for bad in ["0", "65", "-1", "\"8\"", "2.5"] {
        let e = parse(&format!("mail_summaries = {bad}\n")).expect_err(bad);
        assert!(e.to_string().contains("mail_summaries"), "{bad}: {e}");
    }
    let e = parse("mail_summaries = 0\n").expect_err("0");
    assert!(
        e.to_string().contains("mail_summaries = 0: from 1 to 64"),
        "{e}"
    );
}
