//! `/proc`: which processes there are, and each one's state, parent and start time.
//! Read by the supervisor (its children) and by the embedded default (a task's tree).

/// What `/proc/<pid>/stat` says of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `Z` (zombie), …
    pub state: char,
    pub ppid: i32,
    /// The process group.
    pub pgrp: i32,
    /// Clock ticks after boot (field 22): with the pid, names one process for good.
    pub start: u64,
}

impl Stat {
    /// Ended, waiting to be reaped (or being torn down).
    pub fn is_zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// The stat of `pid`, if it exists.
pub fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid …: comm may hold spaces and parentheses; it ends at the last ')'.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Every process id in `/proc` now.
pub fn pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read_whole() {
        let me = stat(std::process::id() as i32).expect("own stat");
        assert_eq!(me.ppid, nix::unistd::getppid().as_raw());
        assert_eq!(me.pgrp, nix::unistd::getpgrp().as_raw());
        assert!(!me.is_zombie());
        assert!(me.start > 0);
        assert!(pids().contains(&(std::process::id() as i32)));
    }
}
