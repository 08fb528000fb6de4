//! The lines of several tasks, printed in the order they were written. Each task's log
//! is read with its times (`timestamps=true`); the lines of all tasks meet here and are
//! held a moment ([`HOLD`]) after they arrive, so that a line another task wrote
//! earlier, still on its way, goes first. A task whose log is being opened holds every
//! line back: what it wrote before it was opened arrives all at once, just after it was
//! opened, so the lines held wait [`HOLD`] from the last opening too. So does a task
//! whose log is not open yet ([`Told::Awaiting`]), for at most [`LATE`]: the job's view
//! can say a task is still waiting while it has already written (its engine tells that
//! its container started after its first output), and the tasks of an attempt start
//! together, behind the gang barrier, so the lines of its peers may follow from its.

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How long a line waits for lines written before it to arrive: more than the embedded
/// default's look at a growing log (200 ms), less than a person notices.
pub const HOLD: Duration = Duration::from_millis(400);

/// How long a line waits at most for a task whose log is not open yet: more than an
/// engine takes to tell that a container started, bounded for a task that does not start.
pub const LATE: Duration = Duration::from_secs(3);

/// Lines held at most; past it the oldest goes out at once.
const MOST_HELD: usize = 20_000;

/// What a task's follower tells the printer.
pub enum Told {
    /// Its log is being opened: what is in it comes at once.
    Opening,
    /// It was opened (true), or could not be (false).
    Opened(bool),
    /// Whether its task's log is not open yet while it may have output (true), or is
    /// open now or never will be (false): told at each change.
    Awaiting(bool),
    /// A line (without its end), with the task's prefix and the time it was written.
    Line {
        prefix: Arc<str>,
        time: Timestamp,
        line: Vec<u8>,
    },
}

/// Starts the printer: it prints what the followers tell it through the returned
/// sender (and its clones) until all of them are dropped, then what it still holds.
pub fn printer(
    out: impl Write + Send + 'static,
) -> (mpsc::Sender<Told>, tokio::task::JoinHandle<()>) {
    let (tell, told) = mpsc::channel(1024);
    (tell, tokio::spawn(print(told, out)))
}

async fn print(mut told: mpsc::Receiver<Told>, mut out: impl Write) {
    let mut held = Held::default();
    let mut tick = tokio::time::interval(HOLD / 4);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = told.recv() => match message {
                Some(message) => held.take(message, Instant::now()),
                None => break,
            },
            _ = tick.tick() => {}
        }
        held.release(Instant::now(), &mut out);
    }
    held.release_all(&mut out);
}

/// The lines on hold, by the time they were written (then by arrival).
#[derive(Default)]
struct Held {
    lines: BTreeMap<(Timestamp, u64), (Arc<str>, Vec<u8>)>,
    /// When each line arrived, in arrival order, and its key.
    arrivals: VecDeque<(Instant, (Timestamp, u64))>,
    /// Followers opening a log.
    opening: usize,
    /// Followers whose task's log is not open yet, and since when one has been (a log
    /// that does not open within [`LATE`] holds nothing back after it).
    awaiting: usize,
    awaiting_since: Option<Instant>,
    /// When a log was last opened: what it holds already is on its way.
    opened: Option<Instant>,
    arrived: u64,
}

impl Held {
    fn take(&mut self, message: Told, now: Instant) {
        match message {
            Told::Opening => self.opening += 1,
            Told::Opened(opened) => {
                self.opening = self.opening.saturating_sub(1);
                if opened {
                    self.opened = Some(now);
                }
            }
            Told::Awaiting(true) => {
                self.awaiting += 1;
                self.awaiting_since.get_or_insert(now);
            }
            Told::Awaiting(false) => {
                self.awaiting = self.awaiting.saturating_sub(1);
                if self.awaiting == 0 {
                    self.awaiting_since = None;
                }
            }
            Told::Line { prefix, time, line } => {
                let key = (time, self.arrived);
                self.arrived += 1;
                self.lines.insert(key, (prefix, line));
                self.arrivals.push_back((now, key));
            }
        }
    }

    /// Prints the lines whose wait is over, and every line written before them.
    fn release(&mut self, now: Instant, out: &mut impl Write) {
        while let Some(&(arrived, key)) = self.arrivals.front() {
            let waited = now.duration_since(arrived);
            let settled = self.opened.is_none_or(|at| now.duration_since(at) >= HOLD);
            let due = self.opening == 0
                && settled
                && waited >= HOLD
                && (self.awaiting == 0
                    || waited >= LATE
                    || self
                        .awaiting_since
                        .is_some_and(|at| now.duration_since(at) >= LATE));
            if !due && self.lines.len() <= MOST_HELD {
                break;
            }
            self.arrivals.pop_front();
            while let Some(entry) = self.lines.first_entry() {
                if *entry.key() > key {
                    break;
                }
                let (prefix, line) = entry.remove();
                write_line(out, &prefix, &line);
            }
        }
        let _ = out.flush();
    }

    fn release_all(&mut self, out: &mut impl Write) {
        for (prefix, line) in std::mem::take(&mut self.lines).into_values() {
            write_line(out, &prefix, &line);
        }
        self.arrivals.clear();
        let _ = out.flush();
    }
}

fn write_line(out: &mut impl Write, prefix: &str, line: &[u8]) {
    let _ = out.write_all(prefix.as_bytes());
    let _ = out.write_all(line);
    let _ = out.write_all(b"\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(prefix: &str, second: i64, text: &str) -> Told {
        Told::Line {
            prefix: Arc::from(prefix),
            time: Timestamp::from_second(1_800_000_000 + second).unwrap(),
            line: text.as_bytes().to_vec(),
        }
    }

    fn printed(out: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_line_written_earlier_goes_first_though_it_arrived_later() {
        let start = Instant::now();
        let mut held = Held::default();
        let mut out = Vec::new();
        held.take(line("[client-0] ", 2, "heard"), start);
        held.release(start, &mut out);
        assert!(out.is_empty(), "held, not printed at once");
        held.take(line("[server-0] ", 1, "listens"), start + HOLD / 2);
        held.release(start + HOLD, &mut out);
        assert_eq!(printed(&out), ["[server-0] listens", "[client-0] heard"]);
    }

    #[test]
    fn a_log_being_opened_holds_every_line_back() {
        let start = Instant::now();
        let mut held = Held::default();
        let mut out = Vec::new();
        held.take(line("[client-0] ", 2, "heard"), start);
        held.take(Told::Opening, start);
        held.release(start + HOLD * 10, &mut out);
        assert!(out.is_empty());
        held.take(Told::Opened(true), start + HOLD * 10);
        held.release(start + HOLD * 10, &mut out);
        assert!(out.is_empty(), "what the log holds is on its way");
        held.take(line("[server-0] ", 1, "listens"), start + HOLD * 10);
        held.release(start + HOLD * 11, &mut out);
        assert_eq!(printed(&out), ["[server-0] listens", "[client-0] heard"]);
    }

    #[test]
    fn a_task_whose_log_is_not_open_yet_holds_lines_back_a_while() {
        let start = Instant::now();
        let mut held = Held::default();
        let mut out = Vec::new();
        held.take(Told::Awaiting(true), start);
        held.take(line("[client-0] ", 2, "heard"), start);
        held.release(start + HOLD * 2, &mut out);
        assert!(out.is_empty(), "held while the server's log is not open");
        held.take(Told::Awaiting(false), start + HOLD * 2);
        held.take(line("[server-0] ", 1, "listens"), start + HOLD * 2);
        held.release(start + HOLD * 3, &mut out);
        assert_eq!(printed(&out), ["[server-0] listens", "[client-0] heard"]);
        // A log that is never opened holds a line LATE at most, and nothing after that.
        let mut held = Held::default();
        let mut out = Vec::new();
        held.take(Told::Awaiting(true), start);
        held.take(line("[client-0] ", 2, "heard"), start);
        held.release(start + LATE, &mut out);
        assert_eq!(printed(&out), ["[client-0] heard"]);
        held.take(line("[client-0] ", 3, "later"), start + LATE);
        held.release(start + LATE + HOLD, &mut out);
        assert_eq!(printed(&out), ["[client-0] heard", "[client-0] later"]);
    }

    #[test]
    fn lines_of_the_same_time_keep_their_order_and_all_go_out_at_the_end() {
        let start = Instant::now();
        let mut held = Held::default();
        let mut out = Vec::new();
        for text in ["a", "b", "c"] {
            held.take(line("[x-0] ", 5, text), start);
        }
        held.release_all(&mut out);
        assert_eq!(printed(&out), ["[x-0] a", "[x-0] b", "[x-0] c"]);
    }
}
