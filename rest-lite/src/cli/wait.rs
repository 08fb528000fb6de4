//! `rest-lite submit --wait`: a live line per role while the job's tasks start (bars on
//! a terminal, a plain line per change elsewhere), until every task runs or the job ends.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use futures::StreamExt;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use pai_client::Client;

use super::human::{RoleProgress, progress};

/// Where the lines go: bars that redraw in place, or plain lines on standard error.
enum Display {
    Bars {
        // Kept for as long as its bars are drawn.
        _multi: MultiProgress,
        bars: Vec<ProgressBar>,
    },
    Lines {
        last: Vec<String>,
    },
}

impl Display {
    fn new(roles: &[RoleProgress]) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self::Lines { last: Vec::new() };
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template("{bar:24} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bars = roles
            .iter()
            .map(|role| {
                let bar = multi.add(ProgressBar::new(role.total as u64));
                bar.set_style(style.clone());
                bar
            })
            .collect();
        Self::Bars {
            _multi: multi,
            bars,
        }
    }

    fn show(&mut self, roles: &[RoleProgress]) {
        let width = roles.iter().map(|r| r.role.len()).max().unwrap_or(0);
        match self {
            Self::Bars { bars, .. } => {
                for (bar, role) in bars.iter().zip(roles) {
                    bar.set_position(role.running as u64);
                    bar.set_message(role.line(width));
                }
            }
            Self::Lines { last } => {
                let lines: Vec<String> = roles.iter().map(|r| r.line(width)).collect();
                for (i, line) in lines.iter().enumerate() {
                    if last.get(i) != Some(line) {
                        tell!("{line}");
                    }
                }
                *last = lines;
            }
        }
    }

    fn finish(&self) {
        if let Self::Bars { bars, .. } = self {
            for bar in bars {
                bar.finish();
            }
        }
    }
}

/// Watches `job` until every task has run for `settle` (as a Deployment's pods count as
/// available after `minReadySeconds`: a command that fails at once, such as a typo,
/// fails within it) or the job ends first (its outcome, and its exit code). `flags`: what
/// a printed command needs to reach the same server as the same user.
pub async fn until_running(
    client: &Client,
    user: &str,
    job: &str,
    page: &str,
    flags: &str,
    settle: Duration,
) -> Result<ExitCode> {
    let mut changes = client.watch(user, job).await?;
    let mut display: Option<Display> = None;
    let mut notes = super::human::Notes::default();
    // Since when every task runs (none while some does not).
    let mut all_running: Option<(tokio::time::Instant, usize, String)> = None;
    loop {
        let next = match &all_running {
            Some((since, ..)) => {
                match tokio::time::timeout_at(*since + settle, changes.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                }
            }
            None => changes.next().await,
        };
        let Some(view) = next else {
            anyhow::bail!("job {job} was deleted before every task ran");
        };
        let view = view?;
        notes.see(job, &view);
        let roles = progress(&view);
        let display = display.get_or_insert_with(|| Display::new(&roles));
        display.show(&roles);
        if view.job_status.state.is_final() {
            display.finish();
            notes.summary(job);
            return Ok(super::follow::outcome(job, &view, false, false));
        }
        let total: usize = roles.iter().map(|r| r.total).sum();
        let running: usize = roles.iter().map(|r| r.running).sum();
        all_running = if total > 0 && running == total {
            let first_role = roles
                .first()
                .map_or("ROLE", |r| r.role.as_str())
                .to_string();
            all_running.or(Some((tokio::time::Instant::now(), total, first_role)))
        } else {
            None
        };
    }
    if let Some(display) = &display {
        display.finish();
    }
    let (total, first_role) = all_running.map(|(_, t, r)| (t, r)).unwrap_or_default();
    say!("job {job}: all {total} tasks running");
    tell!(
        "follow it with: {}{flags}, or open {page}",
        super::invocation::command(&["logs", job, "-r", &first_role, "-f"])
    );
    Ok(ExitCode::SUCCESS)
}
