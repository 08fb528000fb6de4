//! `kube-runtime run` as PID 1 of a new PID namespace, with real processes and signals.

use crate::common;

use std::os::unix::ffi::OsStrExt;

use common::{TaskDir, finish, namespace_init, wait_ready};
use nix::sys::signal::{Signal, kill};

fn run_to_end(task: &TaskDir) -> common::Finished {
    finish(task.pid1().spawn().expect("spawn unshare"))
}

#[test]
fn exit_codes_survive() {
    if !common::root() {
        return;
    }
    for (script, code) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("kill -9 $$", 137),
        ("kill -TERM $$", 143),
    ] {
        let task = TaskDir::new(&format!("code-{code}"));
        task.main(script);
        let out = run_to_end(&task);
        assert_eq!(out.code, Some(code), "{script}: {}", out.stderr);
    }
}

#[test]
fn output_goes_to_the_container_and_the_log() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("output");
    task.main("echo to-stdout; echo to-stderr >&2");
    let out = run_to_end(&task);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stdout, "to-stdout\n");
    assert!(out.stderr.contains("to-stderr\n"), "{}", out.stderr);
    let log = std::fs::read_to_string(task.log_dir().join("user.log")).expect("user.log");
    assert!(
        log.contains("to-stdout\n") && log.contains("to-stderr\n"),
        "{log}"
    );
}

/// The issue's own script: each write lands in order, in the container's log and in the
/// ordered log, on every run (two pipes read apart swap them about every other run).
#[test]
fn stdout_and_stderr_stay_in_the_order_they_were_written() {
    if !common::root() {
        return;
    }
    let mut script = String::new();
    let mut expected = String::new();
    for i in 0..20 {
        let (stream, redirect) = if i % 3 == 1 {
            ("err", " >&2")
        } else {
            ("out", "")
        };
        script.push_str(&format!("echo \"{i} {stream}\"{redirect}\n"));
        expected.push_str(&format!("{i} {stream}\n"));
    }
    script.push_str("printf 'no newline, then ' >&2; echo 'a line on stdout'\n");
    expected.push_str("no newline, then a line on stdout\n");
    for round in 0..25 {
        let task = TaskDir::new(&format!("order-{round}"));
        let container = container_log_of(&task, &script);
        let user_lines = pai_contract::log_lines::keep(&container, Default::default());
        assert_eq!(user_lines, expected, "round {round}: the container log");
        let records = std::fs::read(task.log_dir().join("user.log")).expect("user.log");
        let ordered = pai_contract::ordered_log::output(&records, None);
        assert_eq!(String::from_utf8_lossy(&ordered), expected, "round {round}");
        let stderr = pai_contract::ordered_log::output(
            &records,
            Some(pai_contract::ordered_log::Stream::Stderr),
        );
        assert_eq!(
            String::from_utf8_lossy(&stderr),
            "1 err\n4 err\n7 err\n10 err\n13 err\n16 err\n19 err\nno newline, then "
        );
    }
}

/// Runs `script` as PID 1's user command with stdout and stderr one file (as the
/// embedded default runs it); gives back that file's text.
fn container_log_of(task: &TaskDir, script: &str) -> String {
    task.main(script);
    let container_log = task.root().join("container.log");
    let file = std::fs::File::create(&container_log).expect("container.log");
    let mut command = task.pid1();
    command.stdout(file.try_clone().expect("dup")).stderr(file);
    let out = finish(command.spawn().expect("spawn"));
    assert_eq!(out.code, Some(0));
    std::fs::read_to_string(&container_log).expect("read")
}

/// The script's way to wait until its output is in the container's log: `grep` for
/// `text` there until it is.
fn until_logged(task: &TaskDir, text: &str) -> String {
    let path = task.root().join("container.log");
    format!("until grep -q '{text}' '{}'; do :; done\n", path.display())
}

/// A runtime line logged while the user's line is unended (here the forwarded signal's:
/// WINCH, which the script's `grep`s ignore as every process does by default, once the
/// line's start is in the log) waits for the line's end instead of landing
/// inside it.
#[test]
fn a_runtime_line_waits_for_the_users_line_to_end() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("held");
    let script = format!(
        "trap ':' WINCH\nprintf 'half a line, ' >&2\n{}kill -WINCH 1\necho 'then its end'\n",
        until_logged(&task, "half a line")
    );
    let log = container_log_of(&task, &script);
    let lines: Vec<&str> = log.lines().collect();
    assert!(lines.contains(&"half a line, then its end"), "{log}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("[runtime INFO] ") && l.contains("forwarding")),
        "{log}"
    );
}

/// A user line that stays unended (a progress bar rewriting itself with `\r`) holds the
/// runtime's line only so long: then it begins a line of its own, and the user's line
/// goes on after it.
#[test]
fn a_runtime_line_held_too_long_begins_a_line_of_its_own() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("held-long");
    let script = format!(
        "trap ':' WINCH\nprintf '10%%\\r'\n{}kill -WINCH 1\n{}echo 100%\n",
        until_logged(&task, "10%"),
        until_logged(&task, "forwarding"),
    );
    let log = container_log_of(&task, &script);
    let lines: Vec<&str> = log.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("[runtime INFO] ") && l.contains("forwarding"))
        .unwrap_or_else(|| panic!("no forwarding line: {log}"));
    // The first runtime line after `10%\r` (the forwarding's, or on a busy machine the
    // start's, logged after the script's first write) begins a line of its own.
    assert!(log.contains("10%\r\n[runtime INFO] "), "{log}");
    assert!(
        lines
            .iter()
            .all(|l| !l.contains("[runtime ") || l.starts_with("[runtime ")),
        "{log}"
    );
    assert_eq!(lines[at + 1], "100%", "{log}");
}

/// The cause of a failure goes out in the termination message: the exception that
/// ended a traceback, not the progress line printed after it.
#[test]
fn a_failure_names_its_cause_in_the_termination_message() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("cause");
    task.main(
        "echo 'loading data'\n\
         printf 'Traceback (most recent call last):\\n  File \"train.py\", line 3\\nRuntimeError: CUDA error: device-side assert\\n' >&2\n\
         echo '----------------' >&2\n\
         printf '100%%|##########| 10/10\\r\\n'\n\
         exit 3\n",
    );
    let message = task.root().join("termination-log");
    let mut command = task.pid1();
    command.env("PAI_TERMINATION_LOG", &message);
    let out = finish(command.spawn().expect("spawn"));
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    let text = std::fs::read_to_string(&message).expect("termination message");
    let read = pai_contract::results::read_message(&text).expect("the runtime's");
    let cause = read.cause.expect("a cause");
    assert_eq!(cause.pattern, "python-exception");
    assert_eq!(cause.line, "RuntimeError: CUDA error: device-side assert");
    // An operator's pattern, passed in the container's environment, ranks first; the
    // user command does not see it.
    let task = TaskDir::new("cause-operator");
    task.main(
        "echo \"patterns: ${PAI_RUNTIME_FAILURE_PATTERNS:-unset}\"; echo 'dataset imagenet is not mounted' >&2; echo 'Error: giving up' >&2; exit 12",
    );
    let patterns = r#"[{"name":"dataset-missing","userLogRegex":"dataset \\S+ is not mounted","exitCode":12}]"#;
    let mut command = task.pid1();
    command
        .env("PAI_TERMINATION_LOG", &message)
        .env("PAI_RUNTIME_FAILURE_PATTERNS", patterns);
    let out = finish(command.spawn().expect("spawn"));
    assert_eq!(out.code, Some(12), "{}", out.stderr);
    assert_eq!(out.stdout, "patterns: unset\n");
    let text = std::fs::read_to_string(&message).expect("termination message");
    let cause = pai_contract::results::read_message(&text)
        .and_then(|m| m.cause)
        .expect("a cause");
    assert_eq!(cause.pattern, "dataset-missing", "{text}");
}

#[test]
fn sigterm_reaches_the_user_command() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("term");
    let ready = task.fifo("ready");
    task.main(&format!(
        "echo ready > {}; exec sleep 1000",
        ready.display()
    ));
    let child = task.pid1().spawn().expect("spawn");
    wait_ready(&ready);
    kill(namespace_init(&child), Signal::SIGTERM).expect("signal the runtime");
    let out = finish(child);
    assert_eq!(out.code, Some(143), "{}", out.stderr);
    assert!(
        out.stderr.contains("forwarding to the user command"),
        "{}",
        out.stderr
    );
}

#[test]
fn other_signals_are_forwarded_too() {
    if !common::root() {
        return;
    }
    // As tini: every signal but SIGCHLD (and the synchronous ones, which nobody sends).
    for signal in [
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGWINCH,
        Signal::SIGALRM,
    ] {
        let name = &signal.as_str()[3..];
        let task = TaskDir::new(&format!("signal-{name}"));
        let ready = task.fifo("ready");
        task.main(&format!(
            // Waits about 30 s at most: a signal that never arrives fails the test (7).
            "trap 'echo got-{name}; exit 42' {name}\necho ready > {}\nn=0\nwhile [ $n -lt 30 ]; do sleep 1; n=$((n + 1)); done\nexit 7\n",
            ready.display()
        ));
        let child = task.pid1().spawn().expect("spawn");
        wait_ready(&ready);
        kill(namespace_init(&child), signal).expect("signal");
        let out = finish(child);
        assert_eq!(out.code, Some(42), "{signal}: {}", out.stderr);
        assert_eq!(out.stdout, format!("got-{name}\n"), "{signal}");
    }
}

#[test]
fn a_command_that_ignores_term_is_killed_after_the_grace_period() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("ignore-term");
    let ready = task.fifo("ready");
    task.main(&format!(
        "trap '' TERM\necho ready > {}\nexec sleep 1000\n",
        ready.display()
    ));
    let child = task.pid1().spawn().expect("spawn");
    wait_ready(&ready);
    kill(namespace_init(&child), Signal::SIGTERM).expect("signal");
    let out = finish(child);
    assert_eq!(out.code, Some(137), "{}", out.stderr);
    assert!(
        out.stderr.contains("outlived the grace period"),
        "{}",
        out.stderr
    );
}

/// A stopped task can get TERM more than once (the kernel sends a dying parent's
/// parent-death signal again for each of its threads the task is handed to): the user
/// command's TERM trap runs once, and KILL still follows at the grace period's end.
#[test]
fn a_second_term_within_the_grace_period_is_not_forwarded_again() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("term-twice");
    let ready = task.fifo("ready");
    let acked = task.fifo("acked");
    task.main(&format!(
        "n=0\ntrap 'n=$((n + 1)); echo \"term $n\"; echo got > {}' TERM\necho ready > {}\nwhile :; do sleep 1 & wait $!; done\n",
        acked.display(),
        ready.display()
    ));
    let child = task.pid1().spawn().expect("spawn");
    wait_ready(&ready);
    kill(namespace_init(&child), Signal::SIGTERM).expect("signal");
    wait_ready(&acked);
    kill(namespace_init(&child), Signal::SIGTERM).expect("signal again");
    let out = finish(child);
    assert_eq!(out.stdout, "term 1\n", "{}", out.stderr);
    assert!(
        out.stderr.contains("TERM again within the grace period"),
        "{}",
        out.stderr
    );
    assert_eq!(out.code, Some(137), "{}", out.stderr);
}

#[test]
fn orphans_are_reaped_while_the_job_runs() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("orphan");
    let pid_file = task.root().join("orphan.pid");
    task.main(&format!(
        r#"( sh -c 'echo $$ > {f}' & )
while [ ! -s {f} ]; do :; done
pid=$(cat {f})
n=0
while [ -e /proc/$pid ] && [ $n -lt 200000 ]; do n=$((n + 1)); done
if [ -e /proc/$pid ]; then grep State /proc/$pid/status; exit 9; fi
echo reaped
"#,
        f = pid_file.display()
    ));
    let out = run_to_end(&task);
    assert_eq!(
        out.code,
        Some(0),
        "stdout: {} stderr: {}",
        out.stdout,
        out.stderr
    );
    assert!(out.stdout.contains("reaped"));
}

/// A process the user command leaves behind: it says when TERM reaches it, and gives up
/// by itself after about 30 s, so that a runtime that forgot it ends the test with a
/// failure, not a hang. The user command goes on only once the leftover's trap is set
/// (`<marker>.armed`): a TERM before that would end it without a mark, and the test would
/// blame the runtime for the shell's start-up. `$!` still names the leftover afterwards.
fn leftover(marker: &std::path::Path) -> String {
    format!(
        "( trap 'echo got-term > {m}; exit 0' TERM; : > {m}.armed; n=0; while [ $n -lt 30 ]; do sleep 1; n=$((n + 1)); done ) & while [ ! -e {m}.armed ]; do :; done;",
        m = marker.display()
    )
}

#[test]
fn what_the_user_command_leaves_behind_is_ended() {
    if !common::root() {
        return;
    }
    // A background process survives its shell; the runtime TERMs it and leaves.
    let task = TaskDir::new("leftover");
    let marker = task.root().join("leftover-got-term");
    task.main(&format!("{}\necho started", leftover(&marker)));
    let out = run_to_end(&task);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(&marker).ok().as_deref(),
        Some("got-term\n"),
        "the leftover got TERM from the runtime (the kernel's KILL at the namespace's end would leave no mark): {}",
        out.stderr
    );
}

#[test]
fn a_dying_daemon_does_not_end_the_job() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("daemon");
    let marker = task.root().join("daemon-ran");
    task.daemon(
        "10-dies.sh",
        &format!(
            "echo daemon-output; echo $$ > {m}.tmp; mv {m}.tmp {m}; exit 7",
            m = marker.display()
        ),
    );
    task.daemon("20-stays.sh", "exec sleep 1000");
    // The user command ends only once the runtime has reaped the daemon (a zombie still
    // answers `kill -0`), so the daemon's end is noted while the job still runs.
    task.main(&format!(
        "while [ ! -e {m} ]; do :; done; pid=$(cat {m}); while kill -0 \"$pid\" 2>/dev/null; do :; done; echo user-done; exit 5",
        m = marker.display()
    ));
    let out = run_to_end(&task);
    assert_eq!(
        out.code,
        Some(5),
        "the user command's status, not the daemon's: {}",
        out.stderr
    );
    assert!(
        out.stderr.contains("daemon ended; the job goes on"),
        "{}",
        out.stderr
    );
    let log =
        std::fs::read_to_string(task.log_dir().join("init-10-dies.sh.log")).expect("daemon log");
    assert_eq!(log, "daemon-output\n");
}

#[test]
fn hostile_values_reach_the_user_command_byte_exact() {
    if !common::root() {
        return;
    }
    let values: Vec<(&str, Vec<u8>)> = vec![
        ("QUOTES", b"it's \"quoted\" 'twice'".to_vec()),
        ("NEWLINES", b"a\nb\r\n\nc\n".to_vec()),
        ("SUBST", b"$(touch /tmp/pwned) ${HOME} `id` $$".to_vec()),
        ("BYTES", vec![0xff, 0xfe, b'x', 0x80, b'\\', b'\'']),
        ("EMPTY", Vec::new()),
    ];
    let task = TaskDir::new("hostile");
    let out_dir = task.root().join("out");
    std::fs::create_dir_all(&out_dir).expect("out");
    let os = |v: &Vec<u8>| std::ffi::OsStr::from_bytes(v).to_os_string();
    // Half through the env file (the runtime's dynamic variables), half as the pod's env.
    let file_vars: Vec<(String, std::ffi::OsString)> = values
        .iter()
        .map(|(k, v)| (format!("FILE_{k}"), os(v)))
        .collect();
    task.env_file(
        &file_vars
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_os_str()))
            .collect::<Vec<_>>(),
    );
    let mut script = String::new();
    for (k, _) in &values {
        for prefix in ["FILE_", "POD_"] {
            script.push_str(&format!(
                "printf '%s' \"${prefix}{k}\" > {}/{prefix}{k}\n",
                out_dir.display()
            ));
        }
    }
    task.main(&script);
    let mut command = task.pid1();
    for (k, v) in &values {
        command.env(format!("POD_{k}"), os(v));
    }
    let out = finish(command.spawn().expect("spawn"));
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    for (k, v) in &values {
        for prefix in ["FILE_", "POD_"] {
            let got = std::fs::read(out_dir.join(format!("{prefix}{k}"))).expect("output");
            assert_eq!(&got, v, "{prefix}{k}");
        }
    }
    assert!(
        !std::path::Path::new("/tmp/pwned").exists(),
        "nothing in a value was evaluated"
    );
}

#[test]
fn without_pid_1_it_is_a_subreaper() {
    if !common::root() {
        return;
    }
    // The orphan's parent dies at once, so it is re-parented: to the runtime when it is
    // a subreaper, which then ends it before leaving; else to the machine's init, where
    // it would outlive the runtime.
    let task = TaskDir::new("subreaper");
    let marker = task.root().join("orphan-got-term");
    let pid_file = task.root().join("orphan.pid");
    task.main(&format!(
        "( {} echo $! > {} ) ; exit 4",
        leftover(&marker),
        pid_file.display()
    ));
    let out = finish(task.subreaper().spawn().expect("spawn"));
    assert_eq!(out.code, Some(4), "{}", out.stderr);
    assert_eq!(
        std::fs::read_to_string(&marker).ok().as_deref(),
        Some("got-term\n"),
        "the orphan got TERM from the runtime: {}",
        out.stderr
    );
    let pid = std::fs::read_to_string(&pid_file).expect("pid");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
    assert!(
        stat.is_err(),
        "the orphan is gone and reaped, not left to the machine's init: {stat:?}"
    );
}

#[test]
fn a_missing_env_file_is_one_clear_line() {
    if !common::root() {
        return;
    }
    let task = TaskDir::new("no-env");
    std::fs::remove_file(task.root().join("env.sh")).expect("remove");
    task.main("exit 0");
    let out = finish(task.subreaper().spawn().expect("spawn"));
    assert_eq!(out.code, Some(200));
    assert!(
        out.stderr.contains("did the init container run?"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_container_log_that_is_a_file_and_daemon_logs_stay_within_the_cap() {
    // The embedded default gives the runtime a plain file as stdout and stderr (its
    // container.log); on a cluster they are pipes, which the kubelet rotates.
    let task = TaskDir::new("capped");
    task.daemon(
        "10-chatty.sh",
        "head -c 50000 /dev/zero | tr '\\0' d; echo; sleep 60",
    );
    // The user command starts its output once the daemon's log has rotated (else the
    // user command may end, and the daemon with it, before the daemon wrote the cap).
    let rotated = task.log_dir().join("init-10-chatty.sh.log.1");
    task.main(&format!(
        "while [ ! -e '{}' ]; do sleep 0.01; done; head -c 50000 /dev/zero | tr '\\0' x; echo; echo last-line",
        rotated.display()
    ));
    let container_log = task.root().join("container.log");
    let file = std::fs::File::create(&container_log).expect("container.log");
    let mut command = task.subreaper();
    command
        .env("PAI_LOG_MAX_BYTES", "1000")
        .stdout(file.try_clone().expect("dup"))
        .stderr(file);
    let out = finish(command.spawn().expect("spawn"));
    assert_eq!(out.code, Some(0));
    let log = std::fs::read_to_string(&container_log).expect("read");
    let xs = log.bytes().filter(|&b| b == b'x').count();
    assert_eq!(xs, 1000, "the user's output echoed up to the cap");
    assert!(log.contains("reached its cap of 1000 bytes"), "{log}");
    assert!(!log.contains("last-line"), "nothing echoed past the cap");
    // The user log keeps the latest output, the cap's worth twice at most.
    let dir = task.log_dir();
    let user = std::fs::read_to_string(dir.join("user.log")).expect("user.log");
    assert!(user.contains("last-line"), "{user}");
    for name in [
        "user.log",
        "user.log.1",
        "init-10-chatty.sh.log",
        "init-10-chatty.sh.log.1",
    ] {
        let size = std::fs::metadata(dir.join(name)).map_or(0, |m| m.len());
        assert!(size <= 1000, "{name}: {size} bytes");
    }
    assert!(
        dir.join("init-10-chatty.sh.log.1").exists(),
        "the daemon's log rotated"
    );
}

/// What a reader of a task's logs finds as the task writes: the bytes of the user's
/// lines in the container log so far, and of the output in the ordered log so far.
struct LogFollower {
    /// The read end of the runtime's standard output and error (as the kubelet's).
    container: std::fs::File,
    user_log: std::path::PathBuf,
    user: Option<std::fs::File>,
    records: pai_contract::ordered_log::Reader,
    /// The container log's unended line.
    line: Vec<u8>,
    in_container: usize,
    recorded: usize,
}

impl LogFollower {
    /// Reads the container log's next bytes, then what the ordered log has now (in that
    /// order, as a reader that stamps the container's lines does); false at the end of
    /// the container log.
    fn look(&mut self) -> bool {
        use std::io::Read;
        // A page at a time: the runtime's echo waits for this reader, and meanwhile the
        // writers fill their pipes.
        let mut buf = vec![0; 4096];
        let n = self
            .container
            .read(&mut buf)
            .expect("read the container log");
        self.line.extend_from_slice(&buf[..n]);
        while let Some(end) = self.line.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.line.drain(..=end).collect();
            if pai_contract::log_lines::runtime_time(&line).is_none() {
                self.in_container += line.len();
            }
        }
        if self.user.is_none() {
            self.user = std::fs::File::open(&self.user_log).ok();
        }
        let mut records = vec![0; 64 * 1024];
        while let Some(Ok(read @ 1..)) = self.user.as_mut().map(|f| f.read(&mut records)) {
            self.recorded += self.records.feed(&records[..read]).len();
        }
        n > 0
    }
}

/// A line a reader finds in the container log has its record (its time) in the ordered
/// log already: a reader that follows both as the task writes them never finds the
/// container log ahead. (The runtime echoed each chunk before it wrote the round's
/// records, which writers that keep the pipes full make 256 KiB: a reader in between
/// dated the line with the time of the line before.)
#[test]
fn a_line_in_the_container_log_has_its_record_already() {
    let task = TaskDir::new("record-first");
    // Full pages as fast as `head` writes them (each page one write), to both streams,
    // then short lines of both: 8 MB and their records, within the ordered log's cap
    // (this reader does not follow its rotation).
    let line = "a line as long as a training step prints, its loss and its learning rate";
    task.main(&format!(
        "for out in 1 2; do yes '{line}' | head -n 50000 >&$out & done; wait\n\
         for i in $(seq 1000 3999); do echo \"out $i\"; echo \"err $i\" >&2; done\n"
    ));
    let (read, write) = nix::unistd::pipe().expect("pipe");
    let mut command = task.subreaper();
    command
        .stdout(write.try_clone().expect("dup"))
        .stderr(write);
    let child = command.spawn().expect("spawn");
    // Only the runtime holds the write end now: its end is the pipe's.
    drop(command);
    let mut follower = LogFollower {
        container: std::fs::File::from(read),
        user_log: task.log_dir().join("user.log"),
        user: None,
        records: pai_contract::ordered_log::Reader::new(None),
        line: Vec::new(),
        in_container: 0,
        recorded: 0,
    };
    let (mut looks, mut ahead) = (0, Vec::new());
    while follower.look() {
        looks += 1;
        if follower.recorded < follower.in_container {
            ahead.push((follower.in_container, follower.recorded));
        }
    }
    let out = finish(child);
    assert_eq!(
        out.code,
        Some(0),
        "{}",
        String::from_utf8_lossy(&follower.line)
    );
    let written = 2 * 50_000 * (line.len() + 1) + 3000 * 2 * "out 1000\n".len();
    assert_eq!(follower.in_container, written, "the whole output was read");
    assert!(
        ahead.is_empty(),
        "{} of {looks} looks found lines in the container log without their record \
         (bytes in the container log, in the ordered log): {:?}",
        ahead.len(),
        &ahead[..ahead.len().min(5)]
    );
}

/// On a host whose ssh port another process holds (host networking), the task does not
/// start with a warning in its output: `run` ends as a conflict (FrameworkController's
/// 201, retried elsewhere, not counted) before the user command runs.
#[test]
fn a_taken_ssh_port_ends_the_task_as_a_conflict() {
    let taken = std::net::TcpListener::bind(("0.0.0.0", 0)).expect("a port to take");
    let port = taken.local_addr().expect("address").port();
    let task = TaskDir::new("port-taken");
    let ran = task.root().join("ran");
    task.main(&format!("echo ran > {}", ran.display()));
    let out = finish(
        task.subreaper()
            .env(
                "PAI_SSH_PUB_KEY",
                "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey test",
            )
            .env("PAI_CONTAINER_SSH_PORT", port.to_string())
            .spawn()
            .expect("run"),
    );
    assert_eq!(
        out.code,
        Some(pai_contract::exit::codes::CONTAINER_TRANSIENT_CONFLICT_FAILED),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains(&format!("ssh port {port} is taken")),
        "{}",
        out.stderr
    );
    assert!(!ran.exists(), "the user command did not run");
    drop(taken);
}
