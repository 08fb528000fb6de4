//! `rest-lite submit --wait`: a live line per role while the job's tasks start (bars on
//! a terminal, a plain line per change elsewhere), until every task runs or the job ends.

use std::io::IsTerminal;
use std::process::ExitCode;

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

/// Watches `job` until every task runs (exit 0) or it ends first (its outcome).
/// `flags`: what a printed command needs to reach the same server as the same user.
pub async fn until_running(
    client: &Client,
    user: &str,
    job: &str,
    page: &str,
    flags: &str,
) -> Result<ExitCode> {
    let mut changes = client.watch(user, job).await?;
    let mut display: Option<Display> = None;
    let mut notes = super::human::Notes::default();
    while let Some(view) = changes.next().await {
        let view = view?;
        notes.see(job, &view);
        let roles = progress(&view);
        let display = display.get_or_insert_with(|| Display::new(&roles));
        display.show(&roles);
        let total: usize = roles.iter().map(|r| r.total).sum();
        let running: usize = roles.iter().map(|r| r.running).sum();
        if view.job_status.state.is_final() {
            display.finish();
            return Ok(super::follow::outcome(job, &view, false));
        }
        if total > 0 && running == total {
            display.finish();
            say!("job {job}: all {total} tasks running");
            let first_role = roles.first().map_or("ROLE", |r| r.role.as_str());
            tell!("follow it with: rest-lite logs {job} -r {first_role} -f{flags}, or open {page}");
            return Ok(ExitCode::SUCCESS);
        }
    }
    anyhow::bail!("job {job} was deleted before every task ran")
}
