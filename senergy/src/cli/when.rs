//! A time on the command line, in the forms sacct's `-S` and `-E` take (`parse_time()` in
//! Slurm's `src/common/parse_time.c`, as sacct calls it: a date without a year is in the
//! past), and RFC 3339 or unix seconds for scripts.

use chrono::{DateTime, Datelike, Local, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};

use crate::Failure;

/// `text` as a unix time, `now` the time it is relative to: `YYYY-MM-DD[THH:MM[:SS]]`,
/// `MMDD[YY]`, `MM/DD[/YY]`, `MM.DD[.YY]`, `HH:MM[:SS]` (today), `today` and `midnight`
/// (today's start), `now[{+|-}N[seconds|minutes|hours|days|weeks]]` (local time), RFC 3339,
/// or unix seconds (more than 6 digits: 4 and 6 are MMDD and MMDDYY, as sacct reads them).
pub fn when(text: &str, now: i64) -> Result<i64, Failure> {
    let bad = || {
        Failure::Input(format!(
            "{text:?} is not a time (YYYY-MM-DD[THH:MM[:SS]], MMDD[YY], MM/DD[/YY], \
             HH:MM[:SS], today, now-7days, RFC 3339 or unix seconds)"
        ))
    };
    let text = text.trim();
    let today = DateTime::from_timestamp(now, 0)
        .map(|t| t.with_timezone(&Local).date_naive())
        .ok_or_else(bad)?;
    if let Some(offset) = text.strip_prefix("now") {
        return relative(offset).map(|s| now + s).ok_or_else(bad);
    }
    if matches!(text, "today" | "midnight") {
        return local(today.and_time(NaiveTime::MIN)).ok_or_else(bad);
    }
    let digits = text.bytes().all(|b| b.is_ascii_digit());
    if digits && matches!(text.len(), 4 | 6) {
        let (month, day, year) = (&text[0..2], &text[2..4], text.get(4..6));
        return dated(month, day, year, today, now).ok_or_else(bad);
    }
    if let Some(t) = crate::carbon::parse_time(text) {
        return Ok(t);
    }
    for sep in ['/', '.'] {
        let fields: Vec<&str> = text.split(sep).collect();
        if let [month, day, rest @ ..] = &fields[..]
            && fields.len() <= 3
            && month.len() <= 2
        {
            return dated(month, day, rest.first().copied(), today, now).ok_or_else(bad);
        }
    }
    if let Ok(time) = NaiveTime::parse_from_str(text, "%H:%M:%S")
        .or_else(|_| NaiveTime::parse_from_str(text, "%H:%M"))
    {
        return local(today.and_time(time)).ok_or_else(bad);
    }
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M"))
        .or_else(|_| {
            NaiveDate::parse_from_str(text, "%Y-%m-%d").map(|d| d.and_time(NaiveTime::MIN))
        });
    naive.ok().and_then(local).ok_or_else(bad)
}

/// The local time `naive`, as a unix time (the earlier of a time a clock change repeats).
fn local(naive: NaiveDateTime) -> Option<i64> {
    Local
        .from_local_datetime(&naive)
        .earliest()
        .map(|t| t.timestamp())
}

/// The start of local day `month`/`day` of `year` (two digits, 20YY); without a year, this
/// year's unless that is after `now`, then last year's (sacct's dates are in the past).
fn dated(month: &str, day: &str, year: Option<&str>, today: NaiveDate, now: i64) -> Option<i64> {
    let number = |s: &str| (!s.is_empty() && s.len() <= 2).then(|| s.parse::<u32>().ok())?;
    let (month, day) = (number(month)?, number(day)?);
    let at = |year: i32| local(NaiveDate::from_ymd_opt(year, month, day)?.and_time(NaiveTime::MIN));
    match year {
        Some(yy) => at(2000 + i32::try_from(number(yy)?).ok()?),
        None => at(today.year())
            .filter(|&t| t <= now)
            .or_else(|| at(today.year() - 1)),
    }
}

/// `[{+|-}N[unit]]` after `now`, in seconds (sacct's units, singular or plural).
fn relative(offset: &str) -> Option<i64> {
    if offset.is_empty() {
        return Some(0);
    }
    let (sign, rest) = match offset.as_bytes().first()? {
        b'+' => (1, &offset[1..]),
        b'-' => (-1, &offset[1..]),
        _ => return None,
    };
    let split = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let count: i64 = rest[..split].parse().ok()?;
    let unit = match rest[split..].trim_end_matches('s') {
        "" | "second" => 1,
        "minute" => 60,
        "hour" => 3_600,
        "day" => 86_400,
        "week" => 604_800,
        _ => return None,
    };
    count.checked_mul(unit)?.checked_mul(sign)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-12-06 12:00 local time, and a local date's start.
    fn noon() -> i64 {
        local(day(2026, 12, 6).and_hms_opt(12, 0, 0).expect("a time")).expect("a local time")
    }

    fn day(y: i32, m: u32, d: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, d).expect("a date")
    }

    fn start(y: i32, m: u32, d: u32) -> i64 {
        local(day(y, m, d).and_time(NaiveTime::MIN)).expect("a local time")
    }

    /// The forms sacct's `-S` and `-E` take, as sacct reads them on 2026-12-06.
    #[test]
    fn times_are_read_as_sacct_reads_them() {
        let now = noon();
        let at = |text: &str| when(text, now).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        assert_eq!(at("now"), now);
        assert_eq!(at("now-7days"), now - 7 * 86_400);
        assert_eq!(at("now-1week"), now - 604_800);
        assert_eq!(at("now-2hours"), now - 7_200);
        assert_eq!(at("now+30"), now + 30);
        assert_eq!(at("now-90minutes"), now - 5_400);
        assert_eq!(at("today"), start(2026, 12, 6));
        assert_eq!(at("midnight"), start(2026, 12, 6));
        assert_eq!(at("1201"), start(2026, 12, 1));
        // a date without a year is in the past: December's 24th is last year's
        assert_eq!(at("1224"), start(2025, 12, 24));
        assert_eq!(at("120125"), start(2025, 12, 1));
        assert_eq!(at("12/01"), start(2026, 12, 1));
        assert_eq!(at("12/01/24"), start(2024, 12, 1));
        assert_eq!(at("3.15"), start(2026, 3, 15));
        assert_eq!(at("2026-11-30"), start(2026, 11, 30));
        assert_eq!(at("2026-11-30T10:30"), start(2026, 11, 30) + 37_800);
        assert_eq!(at("08:15"), start(2026, 12, 6) + 29_700);
        assert_eq!(at("1735689600"), 1_735_689_600);
        assert_eq!(at("2025-01-01T00:00:00Z"), 1_735_689_600);
        // seconds are sacct's default unit
        assert_eq!(at("now-7"), now - 7);
        for bad in [
            "",
            "yesterday",
            "now-7years",
            "now*2",
            "1301",
            "1232",
            "13/01",
            "12/1/2/3",
            "25:00",
            "2026-13-01",
        ] {
            assert!(when(bad, now).is_err(), "{bad:?} read as a time");
        }
    }
}
