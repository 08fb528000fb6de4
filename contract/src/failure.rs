//! Why a task failed, in one line taken from its own output: the runtime reads every line
//! the user command writes, and at a failed end names the line that says what went wrong
//! (a Python exception, CUDA running out of memory, an MPI rank that died) instead of
//! whatever line happened to come last (a progress bar, `mpirun`'s row of dashes).
//!
//! Patterns are tried in order of rank: an operator's own (the server's
//! `failurePatterns`, passed to every task in [`PATTERNS_VAR`]) before [`DEFAULTS`]. The
//! first line that matches the best-ranked pattern is the cause; a Python traceback gives
//! its exception's line. With no pattern matched, the last meaningful line of stderr is
//! taken, then of stdout (never a blank line, a banner of dashes, a progress bar or the
//! runtime's own line); a command killed by a signal with nothing to say is named by its
//! signal.
//!
//! OpenPAI's runtime matched "failure patterns" against the user's log the same way; its
//! operator patterns had the same two fields (`userLogRegex`, `exitCode`).

use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};

/// The variable that carries an operator's patterns (JSON, a list of [`Pattern`]) to the
/// runtime of every task.
pub const PATTERNS_VAR: &str = "PAI_RUNTIME_FAILURE_PATTERNS";

/// The longest cause kept, in bytes (a termination message holds 4096 in all).
pub const MAX_LINE: usize = 512;

/// The part of a line that patterns look at: output lines can be megabytes long.
const SCANNED: usize = 4096;

/// One failure pattern.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Pattern {
    /// Its name, shown with the cause (`cuda-out-of-memory`).
    pub name: String,
    /// A regular expression (Rust's `regex` syntax) matched against each line of the
    /// user command's output.
    pub user_log_regex: String,
    /// Only when the user command exited with this code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
}

/// Why a task failed, as its output said it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cause {
    /// The pattern that named it ([`DEFAULTS`]' or an operator's), or `last-stderr-line`,
    /// `last-stdout-line`, `signal`.
    pub pattern: String,
    /// The line, at most [`MAX_LINE`] bytes.
    pub line: String,
}

/// The pattern name of a command the kernel's out-of-memory killer ended (the runtime
/// reads its container's cgroup, not the output).
pub const OOM_KILLED: &str = "oom-killed";
/// What a kubelet calls such an end: a container's reason, and the cause line's first word.
pub const OOM_KILLED_REASON: &str = "OOMKilled";

/// The name of Python's traceback rule in [`DEFAULTS`]' ranking.
pub const PYTHON_EXCEPTION: &str = "python-exception";

/// The default patterns, best first: (name, regular expression). Python's traceback rule
/// ([`PYTHON_EXCEPTION`]) ranks after CUDA's memory and before the rest; it is a rule, not
/// an expression: the exception line that ends a traceback.
pub const DEFAULTS: &[(&str, &str)] = &[
    (
        "cuda-out-of-memory",
        r"(?i)CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|ResourceExhaustedError|OOM when allocating",
    ),
    (PYTHON_EXCEPTION, ""),
    (
        "nccl",
        r"NCCL error|nccl[A-Z][A-Za-z]*Error|NCCL WARN .*(?i:fail|error|timeout)",
    ),
    (
        "mpi",
        r"mpirun noticed that process rank \d+|mpirun was unable to|ORTE was unable to|ORTE daemon has unexpectedly failed",
    ),
    (
        "killed",
        r"\bKilled\b|Segmentation fault|Bus error|core dumped|Out of memory: Killed process",
    ),
    (
        "not-found",
        r"command not found|No such file or directory|can't open file|cannot open|not found in PATH",
    ),
    (
        "error",
        r"^\s*(?:\S+: )?(?:[Ee]rror|ERROR|FATAL|[Ff]atal|panic)\b|\b(?:Error|Exception): ",
    ),
    // mpirun's summary that a rank exited non-zero: the rank's own line above it (a
    // Python error, a missing file) says why, and ranks above; this names the failure
    // only where the rank said nothing a pattern knows.
    (
        "mpi-exit",
        r"(?:mpirun|Horovod) detected that one or more processes exited with non-zero status|Primary job +terminated normally, but \d+ process",
    ),
];

/// A pattern that does not compile or is not allowed, named.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("failurePatterns[{index}] ({name}): {why}")]
pub struct PatternError {
    /// Its place in the operator's list, from 0.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// What is wrong.
    pub why: String,
}

/// Checks an operator's patterns: each names itself, and its expression compiles.
pub fn check(patterns: &[Pattern]) -> Result<(), PatternError> {
    for (index, p) in patterns.iter().enumerate() {
        let fail = |why: String| PatternError {
            index,
            name: p.name.clone(),
            why,
        };
        if p.name.trim().is_empty() || p.name.len() > 64 || p.name.chars().any(char::is_control) {
            return Err(fail(
                "name must be 1–64 characters without control characters".into(),
            ));
        }
        compile(&p.user_log_regex).map_err(|e| fail(format!("userLogRegex: {e}")))?;
    }
    Ok(())
}

fn compile(expression: &str) -> Result<Regex, regex::Error> {
    regex::RegexBuilder::new(expression)
        .size_limit(1 << 20)
        .build()
}

pub use crate::ordered_log::Stream;

/// Keeps the end of the output, line by line, to name a cause from if the command fails.
/// Nothing is matched while the command runs: a task that succeeds never compiles a
/// pattern (a few milliseconds of CPU each task would pay at its start: compiled in every
/// task and matched as lines came, they added 60–80 ms to a 64-task job's start on two
/// cores), and the output's path costs one copy of each line into a bounded window
/// ([`TAIL_BYTES`]). A cause earlier than the window (followed by more than that much
/// output) is not seen.
#[derive(Debug, Default)]
pub struct Detector {
    operator: Vec<Pattern>,
    tail: std::collections::VecDeque<(Stream, String)>,
    bytes: usize,
}

/// The end of the output the detector keeps, in bytes of lines.
pub const TAIL_BYTES: usize = 64 * 1024;

impl Detector {
    /// A detector with `operator`'s patterns ranked before [`DEFAULTS`]. Patterns that do
    /// not compile are left out (the server checks them before they get here).
    pub fn new(operator: &[Pattern]) -> Self {
        Self {
            operator: operator.to_vec(),
            ..Self::default()
        }
    }

    /// A detector with the operator's patterns from [`PATTERNS_VAR`]'s value, if any.
    pub fn from_var(value: Option<&str>) -> Self {
        let operator: Vec<Pattern> = value
            .and_then(|v| serde_json::from_str(v).ok())
            .unwrap_or_default();
        Self::new(&operator)
    }

    /// Reads one line of output (without its newline).
    pub fn line(&mut self, stream: Stream, line: &[u8]) {
        let line = &line[..line.len().min(SCANNED)];
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.starts_with(crate::log_lines::PREFIX) {
            return;
        }
        self.bytes += text.len();
        self.tail.push_back((stream, text.to_string()));
        while self.bytes > TAIL_BYTES
            && let Some((_, old)) = self.tail.pop_front()
        {
            self.bytes -= old.len();
        }
    }

    /// The cause of a failure that ended with `code` (`signal`: the signal's name, when a
    /// signal ended the command); `None` when the output says nothing at all.
    pub fn cause(&self, code: i32, signal: Option<&str>) -> Option<Cause> {
        let mut scan = Scan::new(&self.operator);
        for (stream, line) in &self.tail {
            scan.line(*stream, line);
        }
        scan.cause(code, signal)
    }
}

/// The patterns read over the output's lines in order.
#[derive(Debug)]
struct Scan {
    /// Names, best first; `None` marks the traceback rule's rank.
    names: Vec<Option<String>>,
    /// Exit codes the patterns require, by rank.
    codes: Vec<Option<i32>>,
    /// Every expression, by rank (the traceback's rank holds one that never matches).
    set: RegexSet,
    /// The first line each rank matched, with the exit code it needs.
    first: Vec<Option<String>>,
    /// Inside a Python traceback.
    in_traceback: bool,
    /// A rank whose first line stopped mid-sentence, with its stream: the next line of
    /// that stream goes on it (`Primary job terminated normally, but 1 process
    /// returned` / `a non-zero exit code.`).
    continued: Option<(usize, Stream)>,
    last_stderr: Option<String>,
    last_stdout: Option<String>,
}

impl Scan {
    fn new(operator: &[Pattern]) -> Self {
        let mut names = Vec::new();
        let mut codes = Vec::new();
        let mut expressions = Vec::new();
        for p in operator {
            if compile(&p.user_log_regex).is_ok() {
                names.push(Some(p.name.clone()));
                codes.push(p.exit_code);
                expressions.push(p.user_log_regex.clone());
            }
        }
        for (name, expression) in DEFAULTS {
            if *name == PYTHON_EXCEPTION {
                names.push(None);
                // Never matches: the rule is code, below.
                expressions.push(r"[^\s\S]".to_string());
            } else {
                names.push(Some(name.to_string()));
                expressions.push(expression.to_string());
            }
            codes.push(None);
        }
        let set = regex::RegexSetBuilder::new(&expressions)
            .size_limit(8 << 20)
            .build()
            .unwrap_or_else(|_| RegexSet::empty());
        Self {
            first: vec![None; names.len()],
            names,
            codes,
            set,
            in_traceback: false,
            continued: None,
            last_stderr: None,
            last_stdout: None,
        }
    }

    fn line(&mut self, stream: Stream, text: &str) {
        if text.starts_with("Traceback (most recent call last):") {
            self.in_traceback = true;
        } else if self.in_traceback && !text.starts_with([' ', '\t']) && !text.is_empty() {
            self.in_traceback = false;
            if let Some(rank) = self.names.iter().position(Option::is_none)
                && self.first[rank].is_none()
            {
                self.first[rank] = Some(cut(text));
            }
        }
        if let Some((rank, from)) = self.continued.take()
            && from == stream
            && meaningful(text)
            && let Some(first) = self.first[rank].as_mut()
        {
            *first = cut(&format!("{first} {}", text.trim()));
        }
        for rank in self.set.matches(text).iter() {
            if self.first[rank].is_none() {
                self.first[rank] = Some(cut(text));
                if text
                    .trim_end()
                    .ends_with(|c: char| c.is_alphanumeric() || c == ',')
                {
                    self.continued = Some((rank, stream));
                }
            }
        }
        if meaningful(text) {
            let last = match stream {
                Stream::Stdout => &mut self.last_stdout,
                Stream::Stderr => &mut self.last_stderr,
            };
            *last = Some(cut(text));
        }
    }

    fn cause(&self, code: i32, signal: Option<&str>) -> Option<Cause> {
        let matched = (0..self.names.len()).find_map(|rank| {
            let line = self.first[rank].as_ref()?;
            if self.codes[rank].is_some_and(|c| c != code) {
                return None;
            }
            let pattern = self.names[rank]
                .clone()
                .unwrap_or_else(|| PYTHON_EXCEPTION.to_string());
            Some(Cause {
                pattern,
                line: line.clone(),
            })
        });
        matched
            .or_else(|| {
                signal.map(|s| Cause {
                    pattern: "signal".into(),
                    line: format!("killed by {s}"),
                })
            })
            .or_else(|| {
                let last = |pattern: &str, line: &Option<String>| {
                    line.as_ref().map(|line| Cause {
                        pattern: pattern.into(),
                        line: line.clone(),
                    })
                };
                last("last-stderr-line", &self.last_stderr)
                    .or_else(|| last("last-stdout-line", &self.last_stdout))
            })
    }
}

/// `line` in the words of the user, who wrote a command and not the runtime's script of
/// it: the shell names the script before its errors
/// (`/…/main.sh: line 1: pythn: command not found`, dash's `/…/main.sh: 1: pythn: not
/// found`), which becomes `pythn: command not found (line 1 of the command)`; the
/// script's path anywhere else becomes `the command`.
pub fn in_users_words(line: &str, script: &str) -> String {
    if script.is_empty() {
        return line.to_string();
    }
    let Some(rest) = line
        .strip_prefix(script)
        .and_then(|rest| rest.strip_prefix(": "))
    else {
        return line.replace(script, "the command");
    };
    let numbered = rest.strip_prefix("line ").unwrap_or(rest);
    match numbered.split_once(": ") {
        Some((number, message))
            if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) =>
        {
            format!("{message} (line {number} of the command)")
        }
        _ => rest.to_string(),
    }
}

/// Whether a line could say why something failed: not blank, not a banner of dashes or
/// stars, not a progress bar.
pub fn meaningful(line: &str) -> bool {
    let trimmed = line.trim();
    if trimmed.is_empty() || line.contains('\r') {
        return false;
    }
    if !trimmed.chars().any(char::is_alphanumeric) {
        return false;
    }
    // tqdm and its kin: `45%|████▌     | 45/100 [00:01<00:02, 30.1it/s]`.
    let progress =
        trimmed.contains("%|") || trimmed.ends_with("it/s]") || trimmed.ends_with("s/it]");
    !progress
}

/// At most [`MAX_LINE`] bytes of `line`, cut at a character's boundary.
fn cut(line: &str) -> String {
    let line = line.trim();
    if line.len() <= MAX_LINE {
        return line.to_string();
    }
    let mut end = MAX_LINE - 3;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause_of(lines: &[(Stream, &str)], code: i32) -> Option<Cause> {
        let mut d = Detector::new(&[]);
        for (stream, line) in lines {
            d.line(*stream, line.as_bytes());
        }
        d.cause(code, None)
    }

    use Stream::{Stderr as E, Stdout as O};

    #[test]
    fn a_traceback_gives_its_exception() {
        let cause = cause_of(
            &[
                (O, "loading data"),
                (E, "Traceback (most recent call last):"),
                (E, "  File \"train.py\", line 3, in <module>"),
                (E, "    main()"),
                (E, "ValueError: the learning rate must be positive"),
                (O, "100%|██████████| 10/10 [00:01<00:00,  9.9it/s]"),
            ],
            1,
        )
        .expect("cause");
        assert_eq!(cause.pattern, PYTHON_EXCEPTION);
        assert_eq!(cause.line, "ValueError: the learning rate must be positive");
    }

    #[test]
    fn cuda_memory_ranks_above_the_traceback_it_ends() {
        let cause = cause_of(
            &[
                (E, "Traceback (most recent call last):"),
                (E, "  File \"train.py\", line 9"),
                (
                    E,
                    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
                ),
            ],
            1,
        )
        .expect("cause");
        assert_eq!(cause.pattern, "cuda-out-of-memory");
        assert!(cause.line.starts_with("torch.cuda.OutOfMemoryError"));
    }

    #[test]
    fn mpirun_names_the_rank_not_its_banner() {
        let cause = cause_of(
            &[
                (O, "epoch 1"),
                (E, "--------------------------------------------------------------------------"),
                (E, "mpirun noticed that process rank 1 with PID 0 on node worker-1 exited on signal 9 (Killed)."),
                (E, "--------------------------------------------------------------------------"),
            ],
            137,
        )
        .expect("cause");
        assert_eq!(cause.pattern, "mpi");
        assert!(cause.line.contains("process rank 1"), "{}", cause.line);
        // Open MPI's two-line sentence, read whole.
        let cause = cause_of(
            &[
                (E, "-------------------------------------------------------"),
                (
                    E,
                    "Primary job  terminated normally, but 1 process returned",
                ),
                (
                    E,
                    "a non-zero exit code. Per user-direction, the job has been aborted.",
                ),
                (E, "-------------------------------------------------------"),
            ],
            3,
        )
        .expect("cause");
        assert_eq!(
            cause.line,
            "Primary job  terminated normally, but 1 process returned a non-zero exit code. Per user-direction, the job has been aborted."
        );
    }

    /// `mpirun` (Open MPI 4.1.4) of two ranks of a Python script that is not there, as
    /// it printed on this machine (`horovod-mpi.yaml` where the image lacks the
    /// example): the rank's own line, not mpirun's summaries of it.
    #[test]
    fn mpiruns_summary_gives_way_to_the_ranks_own_line() {
        let missing = "/usr/bin/python3: can't open file '/horovod/examples/pytorch/pytorch_mnist.py': [Errno 2] No such file or directory";
        let dashes = "--------------------------------------------------------------------------";
        let output = [
            (E, missing),
            (E, dashes),
            (
                E,
                "Primary job  terminated normally, but 1 process returned",
            ),
            (
                E,
                "a non-zero exit code. Per user-direction, the job has been aborted.",
            ),
            (E, dashes),
            (E, missing),
            (E, dashes),
            (
                E,
                "mpirun detected that one or more processes exited with non-zero status, thus causing",
            ),
            (
                E,
                "the job to be terminated. The first process to do so was:",
            ),
            (E, ""),
            (E, "  Process name: [[28955,1],1]"),
            (E, "  Exit code:    2"),
            (E, dashes),
        ];
        let cause = cause_of(&output, 2).expect("cause");
        assert_eq!(
            (cause.pattern.as_str(), cause.line.as_str()),
            ("not-found", missing)
        );
        // Where the rank said nothing a pattern knows, mpirun's summary still names it.
        let cause = cause_of(&output[1..5], 2).expect("cause");
        assert_eq!(cause.pattern, "mpi-exit");
        assert!(cause.line.starts_with("Primary job"), "{}", cause.line);
    }

    #[test]
    fn the_runtimes_script_is_not_named() {
        let script = "/tmp/rest-lite-run-1/attempts/0/trainer-0/main.sh";
        for (line, said) in [
            (
                format!("{script}: line 1: pythn: command not found"),
                "pythn: command not found (line 1 of the command)",
            ),
            (
                format!("{script}: 3: pythn: not found"),
                "pythn: not found (line 3 of the command)",
            ),
            (
                format!("{script}: line 2: 42 Killed python train.py"),
                "42 Killed python train.py (line 2 of the command)",
            ),
            (
                format!("bash: {script}: Permission denied"),
                "bash: the command: Permission denied",
            ),
            ("ValueError: bad".to_string(), "ValueError: bad"),
        ] {
            assert_eq!(in_users_words(&line, script), said);
        }
    }

    #[test]
    fn an_oom_kill_is_named() {
        let cause = cause_of(
            &[
                (O, "allocating"),
                (
                    E,
                    "/usr/local/pai/main.sh: line 1:    42 Killed                  python train.py",
                ),
            ],
            137,
        )
        .expect("cause");
        assert_eq!(cause.pattern, "killed");
        let silent = Detector::new(&[])
            .cause(137, Some("SIGKILL"))
            .expect("cause");
        assert_eq!(silent.line, "killed by SIGKILL");
    }

    #[test]
    fn without_a_pattern_the_last_meaningful_stderr_line() {
        let cause = cause_of(
            &[
                (E, "warming up"),
                (E, "the answer was 41"),
                (E, "=========="),
                (E, "   "),
                (O, "a later stdout line"),
                (E, " 45%|████▌     | 45/100 [00:01<00:02, 30.1it/s]"),
            ],
            3,
        )
        .expect("cause");
        assert_eq!(cause.pattern, "last-stderr-line");
        assert_eq!(cause.line, "the answer was 41");
        let out = cause_of(&[(O, "only stdout"), (O, "-----")], 3).expect("cause");
        assert_eq!(out.line, "only stdout");
        assert_eq!(cause_of(&[], 3), None);
    }

    #[test]
    fn an_operators_pattern_ranks_first_and_may_need_an_exit_code() {
        let operator = vec![
            Pattern {
                name: "dataset-missing".into(),
                user_log_regex: r"^dataset \S+ not mounted".into(),
                exit_code: Some(12),
            },
            Pattern {
                name: "broken".into(),
                user_log_regex: "(".into(),
                exit_code: None,
            },
        ];
        assert!(check(&operator[..1]).is_ok());
        let err = check(&operator).expect_err("broken");
        assert_eq!(err.index, 1);
        assert!(
            err.to_string()
                .contains("failurePatterns[1] (broken): userLogRegex")
        );
        let mut d = Detector::new(&operator);
        d.line(E, b"Error: cannot read /data/x");
        d.line(O, b"dataset imagenet not mounted");
        assert_eq!(d.cause(12, None).expect("cause").pattern, "dataset-missing");
        assert_eq!(d.cause(1, None).expect("cause").pattern, "error");
        let var = serde_json::to_string(&operator[..1]).expect("json");
        let mut d = Detector::from_var(Some(&var));
        d.line(O, b"dataset imagenet not mounted");
        assert_eq!(d.cause(12, None).expect("cause").pattern, "dataset-missing");
    }

    #[test]
    fn only_the_end_of_the_output_is_kept() {
        let mut d = Detector::new(&[]);
        d.line(E, b"ValueError: early");
        for i in 0..10_000 {
            d.line(O, format!("step {i} of a long run").as_bytes());
        }
        assert!(d.bytes <= TAIL_BYTES, "{}", d.bytes);
        let cause = d.cause(1, None).expect("cause");
        assert_eq!(
            cause.line, "step 9999 of a long run",
            "the early line is out of the window"
        );
    }

    #[test]
    fn the_runtimes_lines_and_long_lines_are_handled() {
        let mut d = Detector::new(&[]);
        d.line(E, b"[runtime WARN] Error: not the user's");
        assert_eq!(d.cause(1, None), None);
        d.line(E, "é".repeat(2000).as_bytes());
        let cause = d.cause(1, None).expect("cause");
        assert!(cause.line.len() <= MAX_LINE && cause.line.ends_with("..."));
    }
}
