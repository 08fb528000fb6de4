//! What the benchmarks that run the real server share: its URL as its start-up line
//! says it, its resident memory and its CPU time. Each bench uses what it needs of it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::Child;
use std::time::Duration;

/// The URL `rest-lite serve` logs once it listens (`url=…` on its standard error, which
/// the caller piped), waited for at most `within`; the rest of its standard error is
/// read and dropped.
pub fn url_of(server: &mut Child, within: Duration) -> String {
    let stderr = server.stderr.take().expect("the server's stderr, piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("url=").nth(1)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(
                    url.split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
        }
    });
    rx.recv_timeout(within).expect("the server's start-up line")
}

/// VmRSS of `pid` in KiB (0 when it cannot be read).
pub fn rss(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// The anonymous part of [`rss`] (KiB): the heap and stacks, without the binary's and the
/// libraries' pages, which a process holds by the code it ran, not by its data.
pub fn rss_anon(pid: u32) -> u64 {
    status_kib(pid, "RssAnon:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// The Framework the real transformer makes of the JSON spec `text` for `user`, its
/// ports drawn from `seed`.
pub fn framework_of(
    transformer: &pai_translate::transform::Transformer,
    user: &str,
    text: &str,
    seed: u64,
) -> pai_contract::Framework {
    use pai_translate::spec::{JobSpec, SpecFormat, UserName};
    let user = UserName::parse(user).expect("user");
    let spec = JobSpec::parse(text, SpecFormat::Json).expect("spec");
    transformer
        .transform(
            pai_translate::transform::Submission {
                user: &user,
                spec: &spec,
                spec_text: text,
                format: SpecFormat::Json,
            },
            pai_translate::ports::Seed::Fixed(seed),
        )
        .expect("framework")
}

/// A token file in `dir` with one admin, `ops`, whose token is `token`.
pub fn admin_tokens(dir: &std::path::Path, token: &str) -> std::path::PathBuf {
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "users:\n  - {{name: ops, tokenSha256: {}, admin: true}}\n",
            pai_server::auth::hash(token)
        ),
    )
    .expect("tokens");
    tokens
}

/// The config of a server whose finished jobs go into the history in `database` (a
/// libpq connection string) at once, with no bound on how many are kept.
pub fn history_config(database: &str) -> String {
    format!(
        "history: {{database: \"{database}\", frameworkKeptSec: 0}}\nretention: {{finishedJobs: 0}}\n"
    )
}

/// User and system CPU time of `pid`, in clock ticks (`USER_HZ`, 100 a second on Linux);
/// `None` when it cannot be read.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command's name in parentheses: fields 14 and 15 (utime, stime).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}
