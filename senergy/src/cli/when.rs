//! A time on the command line, in the forms sacct's `-S` and `-E` take (`parse_time()` in
//! Slurm's `src/common/parse_time.c`, as sacct calls it: a date without a year is in the
//! past), and RFC 3339 or unix seconds for scripts.

use chrono::{DateTime, Datelike, Days, Local, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};

use crate::Failure;

/// `text` as a unix time, `now` the time it is relative to, in sacct's forms:
/// `YYYY-MM-DD[THH:MM[:SS]]`, `MMDD[YY][-HH:MM[:SS]]`, `MM/DD[/YY][-HH:MM[:SS]]`,
/// `MM.DD[.YY][-HH:MM[:SS]]`, `HH:MM[:SS][AM|PM]` (today), `today`, `tomorrow`,
/// `midnight`, `noon`, `fika` (15:00), `teatime` (16:00), a word and a time together
/// (`today 10:00`, `tomorrow noon`), `now[{+|-}N[seconds|minutes|hours|days|weeks]]`, all
/// in local time and any case; and RFC 3339, or unix seconds (but 4 and 6 digits, which
/// are MMDD and MMDDYY, as sacct reads them).
pub fn when(text: &str, now: i64) -> Result<i64, Failure> {
    let bad = || {
        Failure::Input(format!(
            "{text:?} is not a time (YYYY-MM-DD[THH:MM[:SS]], MMDD[YY], MM/DD[/YY][-HH:MM], \
             HH:MM[:SS][AM|PM], today, noon, now-7days, RFC 3339 or unix seconds)"
        ))
    };
    let text = text.trim();
    let lower = text.to_ascii_lowercase();
    if let Some(offset) = lower.strip_prefix("now") {
        return relative(offset).map(|s| now + s).ok_or_else(bad);
    }
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    if digits && !matches!(text.len(), 4 | 6) {
        return crate::carbon::parse_time(text).ok_or_else(bad);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.timestamp());
    }
    let today = DateTime::from_timestamp(now, 0)
        .map(|t| t.with_timezone(&Local).date_naive())
        .ok_or_else(bad)?;
    sacct_form(&lower, today).ok_or_else(bad)
}

/// The words that name a day (days after today) and those that name a time of day (its
/// hour), as `parse_time()` knows them.
const DAY_WORDS: [(&str, u64); 2] = [("today", 0), ("tomorrow", 1)];
const HOUR_WORDS: [(&str, u32); 4] = [("midnight", 0), ("noon", 12), ("fika", 15), ("teatime", 16)];

/// A date as the text gives it: its year (`None`: as sacct takes a date without one), month
/// and day.
type Dated = (Option<i32>, u32, u32);

/// `text` (lower case) read as `parse_time()` reads it: dates, times and words in any
/// order, separated by blanks, `-` or `T`; a date without a time is its start, a time
/// without a date today's.
fn sacct_form(text: &str, today: NaiveDate) -> Option<i64> {
    let bytes = text.as_bytes();
    let (mut date, mut time): (Option<Dated>, Option<NaiveTime>) = (None, None);
    let mut pos = 0;
    while pos < bytes.len() {
        let rest = &text[pos..];
        if let Some((word, after)) = DAY_WORDS.iter().find(|(w, _)| rest.starts_with(w)) {
            let day = today.checked_add_days(Days::new(*after))?;
            date = Some((Some(day.year()), day.month(), day.day()));
            pos += word.len();
        } else if let Some((word, hour)) = HOUR_WORDS.iter().find(|(w, _)| rest.starts_with(w)) {
            time = Some(NaiveTime::from_hms_opt(*hour, 0, 0)?);
            pos += word.len();
        } else if matches!(bytes[pos], b' ' | b'\t' | b'-' | b't') {
            pos += 1;
        } else if bytes[pos].is_ascii_digit() {
            let len = if bytes.get(pos + 1) == Some(&b':') || bytes.get(pos + 2) == Some(&b':') {
                let (t, len) = clock(rest)?;
                time = Some(t);
                len
            } else {
                let (d, len) = calendar(rest)?;
                date = Some(d);
                len
            };
            pos += len;
        } else {
            return None;
        }
    }
    let day = match date {
        None if time.is_none() => return None,
        None => today,
        Some((Some(year), month, day)) => NaiveDate::from_ymd_opt(year, month, day)?,
        Some((None, month, day)) => in_the_past(month, day, today)?,
    };
    local(day.and_time(time.unwrap_or(NaiveTime::MIN)))
}

/// Up to `max` digits at the start of `text` (at least one): their value and count.
fn number(text: &str, max: usize) -> Option<(u32, usize)> {
    let len = text
        .bytes()
        .take(max)
        .take_while(u8::is_ascii_digit)
        .count();
    Some((
        text.get(..len).filter(|d| !d.is_empty())?.parse().ok()?,
        len,
    ))
}

/// `H[H]:MM[:SS]`, then blanks and `am` or `pm` if any: the time and the bytes read.
fn clock(text: &str) -> Option<(NaiveTime, usize)> {
    let (mut hour, mut pos) = number(text, 2)?;
    let two = |at: usize| -> Option<u32> {
        (text.get(at..at + 1)? == ":")
            .then(|| number(&text[at + 1..], 2).filter(|&(_, len)| len == 2))?
            .map(|(n, _)| n)
    };
    let minute = two(pos)?;
    pos += 3;
    let second = match two(pos) {
        Some(s) => {
            pos += 3;
            s
        }
        None => 0,
    };
    let blanks = text[pos..].len() - text[pos..].trim_start().len();
    let rest = &text[pos + blanks..];
    if rest.starts_with("pm") || rest.starts_with("am") {
        hour = match (rest.starts_with("pm"), hour) {
            (true, 12) | (false, 0..=11) => hour,
            (true, 0..=11) => hour + 12,
            (false, 12) => 0,
            _ => return None,
        };
        pos += blanks + 2;
    }
    Some((NaiveTime::from_hms_opt(hour, minute, second)?, pos))
}

/// `YYYY-MM-DD`, else `MM[./]DD[[./]YY]` (`MMDD[YY]` without separators): the date and
/// the bytes read.
fn calendar(text: &str) -> Option<(Dated, usize)> {
    let bytes = text.as_bytes();
    if bytes.get(4) == Some(&b'-') && bytes.get(7) == Some(&b'-') {
        let (year, 4) = number(text, 4)? else {
            return None;
        };
        let (month, 2) = number(&text[5..], 2)? else {
            return None;
        };
        let (day, len) = number(&text[8..], 2)?;
        return Some(((Some(i32::try_from(year).ok()?), month, day), 8 + len));
    }
    let separator = |at: usize| usize::from(matches!(bytes.get(at), Some(b'.' | b'/')));
    let (month, mut pos) = number(text, 2)?;
    pos += separator(pos);
    let (day, len) = number(&text[pos..], 2)?;
    pos += len;
    pos += separator(pos);
    let year = match number(&text[pos..], 2) {
        Some((yy, 2)) => {
            pos += 2;
            Some(2000 + i32::try_from(yy).ok()?)
        }
        Some(_) => return None,
        None => None,
    };
    ((1..=12).contains(&month) && (1..=31).contains(&day)).then_some(((year, month, day), pos))
}

/// The local time `naive`, as a unix time (the earlier of a time a clock change repeats).
fn local(naive: NaiveDateTime) -> Option<i64> {
    Local
        .from_local_datetime(&naive)
        .earliest()
        .map(|t| t.timestamp())
}

/// Local day `month`/`day` without a year, as sacct takes it (`parse_time` with `past`
/// set): last year's where its month is after this month, else this year's, even a day
/// later this month (on December 6th, `1224` is this December's 24th).
fn in_the_past(month: u32, day: u32, today: NaiveDate) -> Option<NaiveDate> {
    let year = match month > today.month() {
        true => today.year() - 1,
        false => today.year(),
    };
    NaiveDate::from_ymd_opt(year, month, day)
}

/// `[{+|-}N[unit]]` after `now` (lower case, blanks anywhere), in seconds (sacct's units,
/// singular or plural; seconds without one).
fn relative(offset: &str) -> Option<i64> {
    let offset: String = offset.split_whitespace().collect();
    if offset.is_empty() {
        return Some(0);
    }
    let (sign, rest) = match offset.as_bytes()[0] {
        b'+' => (1, &offset[1..]),
        b'-' => (-1, &offset[1..]),
        _ => return None,
    };
    let split = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let count: i64 = rest[..split].parse().ok()?;
    let unit = match &rest[split..] {
        "" | "second" | "seconds" => 1,
        "minute" | "minutes" => 60,
        "hour" | "hours" => 3_600,
        "day" | "days" => 86_400,
        "week" | "weeks" => 604_800,
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

    /// A date without a year whose month is after this one is last year's, as sacct's
    /// `parse_time` reads it on 2026-06-15.
    #[test]
    fn a_date_without_a_year_in_a_later_month_is_last_years() {
        let june = local(day(2026, 6, 15).and_hms_opt(12, 0, 0).expect("a time")).expect("local");
        let at = |text: &str| when(text, june).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        assert_eq!(at("0801"), start(2025, 8, 1));
        assert_eq!(at("06/30"), start(2026, 6, 30));
        assert_eq!(at("0101"), start(2026, 1, 1));
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
        // a date without a year is this year's unless its month is after this one, as
        // sacct's parse_time(past) reads it: December's 24th is this year's
        assert_eq!(at("1224"), start(2026, 12, 24));
        assert_eq!(at("0115"), start(2026, 1, 15));
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
        // sacct's words, any case, blanks within `now`'s offset
        assert_eq!(at("NOW-7DAYS"), now - 7 * 86_400);
        assert_eq!(at("now - 1 day"), now - 86_400);
        assert_eq!(at("Today"), start(2026, 12, 6));
        assert_eq!(at("tomorrow"), start(2026, 12, 7));
        assert_eq!(at("noon"), start(2026, 12, 6) + 12 * 3_600);
        assert_eq!(at("fika"), start(2026, 12, 6) + 15 * 3_600);
        assert_eq!(at("teatime"), start(2026, 12, 6) + 16 * 3_600);
        assert_eq!(at("tomorrow noon"), start(2026, 12, 7) + 12 * 3_600);
        assert_eq!(at("today-08:15"), start(2026, 12, 6) + 29_700);
        // a date and a time together, as sacct's man page gives them
        assert_eq!(at("12/01-10:30"), start(2026, 12, 1) + 37_800);
        assert_eq!(at("12/01/24-10:30:15"), start(2024, 12, 1) + 37_815);
        assert_eq!(at("3.15-17:45"), start(2026, 3, 15) + 63_900);
        assert_eq!(at("120125-08:00"), start(2025, 12, 1) + 28_800);
        assert_eq!(at("1224-09:00"), start(2026, 12, 24) + 32_400);
        // the 12-hour clock
        assert_eq!(at("2:30pm"), start(2026, 12, 6) + 52_200);
        assert_eq!(at("2:30 PM"), start(2026, 12, 6) + 52_200);
        assert_eq!(at("12:15am"), start(2026, 12, 6) + 900);
        assert_eq!(at("12:15pm"), start(2026, 12, 6) + 44_100);
        assert_eq!(at("11:59:30AM"), start(2026, 12, 6) + 43_170);
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
            "13:00pm",
            "10:3",
            "now-7dayss",
            "noonish",
            "tea",
        ] {
            assert!(when(bad, now).is_err(), "{bad:?} read as a time");
        }
    }
}
