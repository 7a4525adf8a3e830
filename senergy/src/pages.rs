//! A period of accounting read a page at a time (`senergy usage`, the list of jobs): each
//! page a span of time whose jobs come in one query, so that a year of a site's jobs is
//! never in memory at once. The span follows what the pages hold: it doubles after a page
//! of few jobs (a century of nothing takes a dozen queries, not thousands) and halves after
//! one of many. Pure: the caller queries and says how many jobs each page had.

/// The jobs a page aims to hold.
const JOBS_PER_PAGE: usize = 5_000;
/// The first page's span: a week.
const FIRST_SPAN_S: i64 = 7 * 86_400;
/// The shortest and longest spans: an hour (a page of more jobs than that is read
/// whole), and ten years.
const MIN_SPAN_S: i64 = 3_600;
const MAX_SPAN_S: i64 = 10 * 365 * 86_400;

/// The pages of `[start, end)`, one after another.
#[derive(Debug)]
pub struct Pages {
    next: i64,
    end: i64,
    span: i64,
}

impl Pages {
    pub fn new(start: i64, end: i64) -> Pages {
        Pages {
            next: start,
            end,
            span: FIRST_SPAN_S,
        }
    }

    /// The next page, `[from, to)`, if any is left.
    pub fn next_page(&mut self) -> Option<(i64, i64)> {
        if self.next >= self.end {
            return None;
        }
        let from = self.next;
        let to = from.saturating_add(self.span).min(self.end);
        self.next = to;
        Some((from, to))
    }

    /// The page just read held `jobs` jobs: the next one's span follows.
    pub fn held(&mut self, jobs: usize) {
        if jobs < JOBS_PER_PAGE / 4 {
            self.span = (self.span.saturating_mul(2)).min(MAX_SPAN_S);
        } else if jobs > JOBS_PER_PAGE {
            self.span = (self.span / 2).max(MIN_SPAN_S);
        }
    }

    /// Whether `[from, to)` is the period's last page.
    pub fn is_last(&self, to: i64) -> bool {
        to >= self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `[start, end)` with `jobs_in(from, to)` jobs in each page: the pages, in order.
    fn read(start: i64, end: i64, jobs_in: impl Fn(i64, i64) -> usize) -> Vec<(i64, i64)> {
        let mut pages = Pages::new(start, end);
        let mut read = Vec::new();
        while let Some((from, to)) = pages.next_page() {
            pages.held(jobs_in(from, to));
            read.push((from, to));
        }
        read
    }

    #[test]
    fn the_pages_tile_the_period_and_a_century_of_nothing_takes_a_few_queries() {
        let (start, end) = (946_684_800, 4_102_444_800); // 2000 to 2100
        let pages = read(start, end, |_, _| 0);
        assert_eq!(pages.first().map(|p| p.0), Some(start));
        assert_eq!(pages.last().map(|p| p.1), Some(end));
        assert!(pages.windows(2).all(|w| w[0].1 == w[1].0));
        assert!(pages.len() <= 25, "{} queries", pages.len());
    }

    #[test]
    fn a_busy_period_takes_pages_of_about_the_aim() {
        // 100 000 jobs over a year, evenly: about 1 900 a week
        let (start, end) = (0, 365 * 86_400);
        let rate = 100_000.0 / (365.0 * 86_400.0);
        let jobs = |from: i64, to: i64| ((to - from) as f64 * rate) as usize;
        let pages = read(start, end, jobs);
        assert!(
            pages.iter().all(|(f, t)| jobs(*f, *t) <= 2 * JOBS_PER_PAGE),
            "{pages:?}"
        );
        assert!(pages.len() < 60, "{} queries", pages.len());
        // a burst of jobs halves the span, an hour at least
        let mut burst = Pages::new(0, 30 * 86_400);
        let (_, to) = burst.next_page().expect("a page");
        burst.held(100_000);
        let (from, next) = burst.next_page().expect("a page");
        assert_eq!((from, next - from), (to, FIRST_SPAN_S / 2));
        for _ in 0..20 {
            burst.held(100_000);
        }
        assert_eq!(burst.span, MIN_SPAN_S);
    }
}
