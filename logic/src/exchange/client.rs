//! The step's end of the exchange: its figures as fresh as it wants them, by the cheapest
//! channel that serves (slot, question, file), whichever slurmd it finds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::PROTOCOL_VERSION;
use super::ask::{self, Answer, Request, Unanswered, Want};
use super::doorbell::{self, ANSWER_WAIT, Ring};
use super::slots::{self, Slot};
use crate::attribution::StepKey;
use crate::ledger::{LEDGER_PERIOD, Ledger, LedgerError};
use crate::source::stale_after;

/// How long a read at one of Slurm's periodic polls waits for slurmd's answer, which it
/// gives from memory at once: longer only while its doorbell's thread is busy (or slurmd
/// hangs, when the step reads the file).
const CURRENT_WAIT: Duration = Duration::from_millis(100);

/// What a step's read got of slurmd.
pub(crate) struct Fetched {
    /// The step's figures, `None` where there is no ledger at all.
    pub answer: Result<Option<Answer>, LedgerError>,
    /// Whether slurmd left a question for a fresh figure unanswered (the answer is then
    /// the last update's, older than the question).
    pub unanswered: bool,
}

/// The step's side of the exchange with the slurmd of the ledger file at `path`.
pub(crate) struct Client {
    path: PathBuf,
    /// slurmd's slots file, held open once found ([`slots`]): Slurm's periodic polls read
    /// their figure there.
    slots: Option<slots::Reader>,
    /// Whether slurmd answered the last read (else it read the file).
    answered: bool,
    /// The version it asks in: this release's until a slurmd of the version before
    /// answered in its own, then that one (which this release's slurmd reads too): a
    /// slurmd of before costs one dropped question, not one per read.
    version: u16,
}

impl Client {
    /// The client of the slurmd that keeps the ledger file `ledger`.
    pub(crate) fn new(ledger: &Path) -> Self {
        Self {
            path: ledger.to_path_buf(),
            slots: None,
            answered: false,
            version: PROTOCOL_VERSION,
        }
    }

    /// The ledger file.
    pub(crate) fn ledger(&self) -> &Path {
        &self.path
    }

    /// Whether slurmd's last update is older than `period` at unix time `called`: by its
    /// last answer (whose update the step counted at `counted_at`), or by the file's time
    /// where the step read the file.
    pub(crate) fn late(&self, counted_at: Option<f64>, called: f64, period: Duration) -> bool {
        if self.answered {
            counted_at.is_none_or(|at| called - at > period.as_secs_f64())
        } else {
            !doorbell::written_within(&self.path, period)
        }
    }

    /// The figures of `key` (or the node's alone) as fresh as `want` says, at unix time
    /// `called`. Current ones from the step's slot where slurmd writes slots; else asked of
    /// slurmd in this release's version, then one back where slurmd dropped the question
    /// unread; where nobody listens (a slurmd of version 1, or one starting again) the step
    /// rings and reads the ledger file, waiting no longer than [`ANSWER_WAIT`] in all.
    pub(crate) fn figure(&mut self, key: Option<StepKey>, want: Want, called: f64) -> Fetched {
        if want == Want::Current
            && let Some(answer) = self.read_slot(key, called)
        {
            self.answered = true;
            return Fetched {
                answer: Ok(Some(answer)),
                unanswered: false,
            };
        }
        let wait = if want.waits() {
            ANSWER_WAIT
        } else {
            CURRENT_WAIT
        };
        let request = Request {
            version: self.version,
            ..Request::new(key, want)
        };
        let asked = self.ask(request, wait);
        self.answered = asked.is_ok();
        let from_file = |path: &Path| {
            Ledger::load(path).map(|l| l.map(|ledger| Answer::from_ledger(&ledger, key)))
        };
        let unanswered = match asked {
            Ok(answer) => {
                return Fetched {
                    answer: Ok(Some(answer)),
                    unanswered: false,
                };
            }
            // slurmd listens but is late: the wait is spent, the file is as good as it gets
            Err(Unanswered::TimedOut) => want.waits(),
            Err(Unanswered::Refused | Unanswered::Dropped) => {
                let doorbell = doorbell::doorbell_path(&self.path);
                match want {
                    Want::Current => false,
                    Want::Refresh => {
                        doorbell::ring_without_waiting(&doorbell);
                        !doorbell::written_within(&self.path, LEDGER_PERIOD)
                    }
                    Want::Fresh => {
                        !doorbell::freshen(&doorbell, &self.path, Ring::Fresh).is_fresh()
                    }
                    Want::Last { stepd } => {
                        !doorbell::freshen(&doorbell, &self.path, Ring::Last { stepd }).is_fresh()
                    }
                }
            }
        };
        Fetched {
            answer: from_file(&self.path),
            unanswered,
        }
    }

    /// Asks `request`, then one version back where slurmd drops it unread: a slurmd of the
    /// version before cannot read this one's question (`super`'s "Versions"). The version
    /// that was answered is the one asked in from then on.
    fn ask(&mut self, request: Request, wait: Duration) -> Result<Answer, Unanswered> {
        let socket = ask::ask_path(&self.path);
        let asked = ask::ask(&socket, request, wait);
        let (Err(Unanswered::Dropped), Some(back)) = (&asked, request.one_back()) else {
            return asked;
        };
        let answered = ask::ask(&socket, back, wait);
        if answered.is_ok() {
            self.version = back.version;
        }
        answered
    }

    /// Its figures as of slurmd's last update, from its slot ([`slots`]): `None` where
    /// slurmd writes no slots, the step has none, its slot is stale (slurmd stopped, or
    /// another began a file of its own) or torn at every try, when it asks slurmd. A file
    /// gone or stale is opened again at the next read.
    fn read_slot(&mut self, key: Option<StepKey>, called: f64) -> Option<Answer> {
        if self.slots.is_none() {
            self.slots = slots::Reader::open(&self.path);
        }
        let read = self.slots.as_ref()?.read(key);
        match read {
            Slot::Found(answer)
                if called - answer.sampled_at <= stale_after(LEDGER_PERIOD).as_secs_f64() =>
            {
                Some(answer)
            }
            Slot::Found(_) | Slot::Gone => {
                self.slots = None;
                None
            }
            Slot::Missing | Slot::Torn => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;

    use super::*;
    use crate::attribution::StepId;
    use crate::exchange::ask::ask_path;

    /// A slurmd of version 2 (questions without their version, no slots): a question it
    /// cannot read it drops unread, one it can it answers with the node's figure `joules`.
    /// Returns the questions it heard, in order, once `questions` came.
    fn slurmd_of_version_2(
        ledger: &Path,
        joules: f64,
        questions: usize,
    ) -> std::thread::JoinHandle<Vec<String>> {
        let socket = ask_path(ledger);
        std::fs::create_dir_all(socket.parent().expect("the doorbell's dir")).expect("dir");
        let listener = UnixListener::bind(&socket).expect("listen");
        std::thread::spawn(move || {
            let mut heard = Vec::new();
            for _ in 0..questions {
                let (stream, _) = listener.accept().expect("a step");
                let mut line = String::new();
                BufReader::new(&stream)
                    .read_line(&mut line)
                    .expect("its question");
                let line = line.trim_end().to_string();
                if line.starts_with("ask ") {
                    let answer = Answer {
                        epoch: 1,
                        sampled_at: unix_now(),
                        node: crate::ledger::Account {
                            joules,
                            ..Default::default()
                        },
                        ..Answer::default()
                    };
                    (&stream).write_all(&answer.encode()).expect("answer");
                }
                heard.push(line);
            }
            heard
        })
    }

    fn unix_now() -> f64 {
        crate::ledger::unix(std::time::SystemTime::now())
    }

    /// A step of this release whose slurmd is of the version before: its question is
    /// dropped unread, it asks again in that version's words and is answered, and asks in
    /// them from then on; nothing else is sent (no ring, no other version).
    #[test]
    fn a_slurmd_of_the_version_before_is_asked_in_its_words() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ledger = tmp.path().join("energy-ledger.0.json");
        let slurmd = slurmd_of_version_2(&ledger, 1_234.0, 3);
        let mut client = Client::new(&ledger);
        let key = Some(StepKey {
            job: 7,
            step: StepId::BATCH,
        });
        let fetched = client.figure(key, Want::Fresh, unix_now());
        let answer = fetched.answer.expect("read").expect("answered");
        assert_eq!(answer.node.joules, 1_234.0);
        assert!(!fetched.unanswered);
        assert!(
            client.late(None, unix_now(), LEDGER_PERIOD),
            "answered: late by its answer"
        );
        // its next read asks in the version that was answered, at once
        let again = client.figure(key, Want::Refresh, unix_now());
        assert!(again.answer.expect("read").is_some());
        assert_eq!(
            slurmd.join().expect("slurmd"),
            vec![
                format!("ask{PROTOCOL_VERSION} 7.4294967291 fresh"),
                "ask 7.4294967291 fresh".to_string(),
                "ask 7.4294967291 refresh".to_string()
            ]
        );
    }

    /// Where nobody listens (a slurmd of version 1, or one starting again) the step reads
    /// the ledger file: `None` where there is none, never a figure of its own making.
    #[test]
    fn without_a_listener_the_file_is_read() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let ledger = tmp.path().join("energy-ledger.0.json");
        let mut client = Client::new(&ledger);
        let fetched = client.figure(None, Want::Current, unix_now());
        assert!(matches!(fetched.answer, Ok(None)));
        assert!(!fetched.unanswered);
    }
}
