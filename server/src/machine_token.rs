//! The token of this machine's own server: without a token file, `rest-lite serve` and
//! `rest-lite run` accept only the token kept in `<state dir>/token` (made at the first
//! start: 32 random bytes in hex, a file only the server's user can read, in a directory
//! only that user can enter). The command line of the same user reads it from there, so
//! nothing has to be typed; another account of the machine, or a web page, has no way to
//! learn it and is refused.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ring::rand::SecureRandom;

/// The token's file in the state directory.
pub const FILE: &str = "token";

#[derive(Debug, thiserror::Error)]
pub enum MachineTokenError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is not private: it belongs to uid {owner} with mode {mode:o}, and must belong to this user (uid {me}) with no access for others (chmod {want:o} {path})"
    )]
    NotPrivate {
        path: String,
        owner: u32,
        mode: u32,
        me: u32,
        want: u32,
    },
    #[error("{path} does not hold a token (64 hex digits); remove it to get a new one")]
    Malformed { path: String },
    #[error("the system gave no random bytes for a token")]
    NoRandomness,
}

/// Where the token of the server with state in `state_dir` is kept.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> MachineTokenError + '_ {
    move |source| MachineTokenError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Refuses `path` unless it is this user's and no one else may `forbidden` it (mode bits).
fn check_private(path: &Path, forbidden: u32, want: u32) -> Result<(), MachineTokenError> {
    let meta = std::fs::metadata(path).map_err(io(path))?;
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.permissions().mode() & 0o7777;
    if meta.uid() != me || mode & forbidden != 0 {
        return Err(MachineTokenError::NotPrivate {
            path: path.display().to_string(),
            owner: meta.uid(),
            mode,
            me,
            want,
        });
    }
    Ok(())
}

/// The token of the server with state in `state_dir`, made now if there is none. The
/// directory is created 0700 when missing; an existing one, or token file, that another
/// user owns or may write (or, for the file, read) is refused, naming the fix.
pub fn load_or_create(state_dir: &Path) -> Result<String, MachineTokenError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .map_err(io(state_dir))?;
    check_private(state_dir, 0o022, 0o700)?;
    let file = path(state_dir);
    let mut random = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut random)
        .map_err(|_| MachineTokenError::NoRandomness)?;
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
    {
        Ok(mut new) => {
            new.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| new.sync_all())
                .map_err(io(&file))?;
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            check_private(&file, 0o077, 0o600)?;
            read_file(&file)
        }
        Err(e) => Err(io(&file)(e)),
    }
}

fn read_file(file: &Path) -> Result<String, MachineTokenError> {
    let text = std::fs::read_to_string(file).map_err(io(file))?;
    let token = text.trim();
    if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(MachineTokenError::Malformed {
            path: file.display().to_string(),
        });
    }
    Ok(token.to_string())
}

/// The token of the server with state in `state_dir`, for its command line; `None` when
/// there is none this user may read.
pub fn read(state_dir: &Path) -> Option<String> {
    read_file(&path(state_dir)).ok()
}

/// The file where the server with state in `state_dir` says where it serves and which
/// process it is: `<url> <pid>`.
pub const SERVES_FILE: &str = "serves";

/// Records that this process serves at `url`, for the command line of the same user to
/// send the token there and nowhere else ([`serves`]).
pub fn record_serving(state_dir: &Path, url: &str) -> Result<(), MachineTokenError> {
    let file = state_dir.join(SERVES_FILE);
    let partial = state_dir.join(format!("{SERVES_FILE}.partial"));
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .and_then(|mut f| f.write_all(format!("{url} {}\n", std::process::id()).as_bytes()))
        .map_err(io(&partial))?;
    std::fs::rename(&partial, &file).map_err(io(&file))
}

/// Whether `url` is where this machine's server with state in `state_dir` serves now: the
/// one its running process recorded ([`record_serving`]; a process of this user), at the
/// same scheme, host and port (`localhost` and `127.0.0.1` are one host). Only then does
/// the command line send it the token of that directory: another server (elsewhere, or
/// another program on this machine) never gets it.
pub fn serves(state_dir: &Path, url: &str) -> bool {
    let Ok(text) = std::fs::read_to_string(state_dir.join(SERVES_FILE)) else {
        return false;
    };
    let Some((recorded, pid)) = text.trim().rsplit_once(' ') else {
        return false;
    };
    let ours = pid.parse::<u32>().is_ok_and(|pid| {
        std::fs::metadata(format!("/proc/{pid}"))
            .is_ok_and(|m| m.uid() == nix::unistd::geteuid().as_raw())
    });
    ours && origin(recorded).is_some() && origin(recorded) == origin(url)
}

/// Whether `url` names a server of this machine (a loopback name, or the address a
/// server listens on for all), as [`serves`] compares them.
pub fn on_this_machine(url: &str) -> bool {
    origin(url).is_some_and(|(_, host, _)| host == "loopback")
}

/// `scheme://host:port` of `url`, loopback names (and the unspecified address a server
/// listens on for all) as one, the port made explicit.
fn origin(url: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().ok()?),
        _ => (authority, if scheme == "https" { 443 } else { 80 }),
    };
    let host = host.trim_matches(['[', ']']).to_ascii_lowercase();
    let host = match host.as_str() {
        // A server on every address (0.0.0.0) answers on loopback too.
        "localhost" | "127.0.0.1" | "::1" | "0.0.0.0" | "::" => "loopback".to_string(),
        _ => host,
    };
    Some((scheme, host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory for one test, removed when it goes out of scope (a failing test's
    /// too), and the state directory in it, not made yet.
    fn scratch(name: &str) -> (pai_test_support::scratch::TempDir, PathBuf) {
        let scratch = pai_test_support::scratch(&format!("rest-lite-machine-token-{name}"));
        let dir = scratch.path().join("state");
        (scratch, dir)
    }

    #[test]
    fn loopback_names_are_this_machine() {
        for here in [
            "http://127.0.0.1:9186",
            "http://localhost:1/x",
            "http://[::1]:2",
            "https://0.0.0.0",
        ] {
            assert!(on_this_machine(here), "{here}");
        }
        for elsewhere in [
            "http://jobs.example.com",
            "http://10.0.0.5:9186",
            "not a url",
        ] {
            assert!(!on_this_machine(elsewhere), "{elsewhere}");
        }
    }

    #[test]
    fn the_token_goes_only_where_this_users_server_serves() {
        let (_scratch, dir) = scratch("serves");
        load_or_create(&dir).expect("made");
        assert!(!serves(&dir, "http://127.0.0.1:9186"), "no server recorded");
        record_serving(&dir, "http://0.0.0.0:40125").expect("recorded");
        assert!(
            serves(&dir, "http://127.0.0.1:40125"),
            "every address is loopback too"
        );
        record_serving(&dir, "http://127.0.0.1:40123").expect("recorded");
        for same in [
            "http://127.0.0.1:40123",
            "http://localhost:40123/",
            "HTTP://127.0.0.1:40123/api/v1/jobs",
        ] {
            assert!(serves(&dir, same), "{same}");
        }
        for other in [
            "http://127.0.0.1:40124",
            "https://127.0.0.1:40123",
            "http://10.0.0.7:40123",
            "http://127.0.0.1",
            "not a url",
        ] {
            assert!(!serves(&dir, other), "{other}");
        }
        // A record whose process is gone (or another user's) sends nothing.
        std::fs::write(dir.join(SERVES_FILE), "http://127.0.0.1:40123 999999999\n").expect("write");
        assert!(!serves(&dir, "http://127.0.0.1:40123"));
    }

    #[test]
    fn made_once_private_and_read_back() {
        let (_scratch, dir) = scratch("once");
        let token = load_or_create(&dir).expect("made");
        assert_eq!(token.len(), 64);
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&path(&dir)), 0o600);
        assert_eq!(load_or_create(&dir).expect("again"), token);
        assert_eq!(read(&dir).as_deref(), Some(token.as_str()));
    }

    #[test]
    fn a_file_others_may_read_is_refused() {
        let (_scratch, dir) = scratch("open");
        load_or_create(&dir).expect("made");
        std::fs::set_permissions(path(&dir), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let err = load_or_create(&dir).expect_err("refused");
        assert!(err.to_string().contains("chmod 600"), "{err}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = load_or_create(&dir).expect_err("refused");
        assert!(err.to_string().contains("chmod 700"), "{err}");
    }
}
