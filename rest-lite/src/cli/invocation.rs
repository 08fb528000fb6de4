//! How the person started this program, so that every command it prints runs as printed
//! where they are:
//! - under `cargo run`, `cargo run -p rest-lite --` with the profile it was built in
//!   (`--release`). Cargo replaces itself with the program (it `exec`s it), so what is
//!   left of it is the environment it sets (`CARGO`, `CARGO_PKG_NAME`), which a test
//!   binary of the package has too: a program whose parent is one of this build's test
//!   binaries is not under `cargo run`;
//! - where the `PATH` finds this very program, its name, `rest-lite`;
//! - else its absolute path (`target/debug/rest-lite` run by hand, a copy elsewhere).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::human::shell_word;

/// The words that start this program again, here: `cargo run -p rest-lite --`,
/// `rest-lite` or `/path/to/rest-lite`.
pub fn program() -> &'static str {
    static PROGRAM: OnceLock<String> = OnceLock::new();
    PROGRAM.get_or_init(|| {
        let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("rest-lite"));
        let cargo_env = std::env::var_os("CARGO").is_some()
            && std::env::var("CARGO_PKG_NAME").is_ok_and(|name| name == "rest-lite");
        let parent = std::fs::read_link(format!("/proc/{}/exe", nix::unistd::getppid())).ok();
        cargo_run_of(&exe, cargo_env, parent.as_deref())
            .unwrap_or_else(|| program_of(std::env::var_os("PATH"), &exe))
    })
}

/// `args` (a command and its arguments, `["status", "my job"]`) as one line to type here.
pub fn command(args: &[&str]) -> String {
    let mut line = program().to_string();
    for arg in args {
        line.push(' ');
        line.push_str(&shell_word(arg));
    }
    line
}

/// `text` with each command it quotes (`` `rest-lite status JOB` ``) as typed here.
pub fn typed_here(text: &str) -> String {
    text.replace("`rest-lite ", &format!("`{} ", program()))
}

/// This process's own command line with `--engine host` in place of any `--engine`:
/// the same `run` or `serve`, with the job's tasks on this machine's host.
pub fn this_on_host() -> String {
    // Lossy where an argument is not UTF-8 (`std::env::args` would panic on it).
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let words: Vec<&str> = with_engine_host(&args);
    command(&words)
}

/// `args` (a subcommand first) with every `--engine X` and `--engine=X` left out and
/// `--engine host` after the subcommand.
fn with_engine_host(args: &[String]) -> Vec<&str> {
    let mut words = Vec::with_capacity(args.len() + 2);
    let mut rest = args.iter().map(String::as_str);
    if let Some(subcommand) = rest.next() {
        words.push(subcommand);
        words.extend(["--engine", "host"]);
    }
    while let Some(arg) = rest.next() {
        if arg == "--" {
            words.push(arg);
            words.extend(rest.by_ref());
            break;
        }
        if arg == "--engine" {
            rest.next();
        } else if !arg.starts_with("--engine=") {
            words.push(arg);
        }
    }
    words
}

/// `cargo run …` for `exe`, when `cargo_env` says cargo started it and its parent is not
/// one of this build's test binaries (`<profile>/deps/…`).
fn cargo_run_of(exe: &Path, cargo_env: bool, parent: Option<&Path>) -> Option<String> {
    let profile_dir = exe.parent()?;
    let a_test_of_this_build = parent.and_then(Path::parent).is_some_and(|dir| {
        dir.file_name().is_some_and(|n| n == "deps") && dir.parent() == Some(profile_dir)
    });
    if !cargo_env || a_test_of_this_build {
        return None;
    }
    let profile = match profile_dir.file_name()?.to_str()? {
        "debug" => String::new(),
        "release" => " --release".to_string(),
        other => format!(" --profile {}", shell_word(other)),
    };
    Some(format!("cargo run{profile} -p rest-lite --"))
}

/// [`program`] where cargo did not start it: its name where `path` finds it, else its path.
fn program_of(path: Option<OsString>, exe: &Path) -> String {
    let exe = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    let name = exe
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "rest-lite".to_string());
    let on_path = path.iter().flat_map(std::env::split_paths).find_map(|dir| {
        let candidate = dir.join(&name);
        candidate.is_file().then_some(candidate)
    });
    let same = on_path.is_some_and(|found| std::fs::canonicalize(found).is_ok_and(|f| f == exe));
    if same {
        shell_word(&name)
    } else {
        shell_word(&exe.to_string_lossy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn under_cargo_run_cargo_run_in_the_profile_it_was_built_in() {
        let debug = Path::new("/w/target/debug/rest-lite");
        let shell = Some(Path::new("/usr/bin/bash"));
        assert_eq!(
            cargo_run_of(debug, true, shell).as_deref(),
            Some("cargo run -p rest-lite --")
        );
        assert_eq!(
            cargo_run_of(Path::new("/w/target/release/rest-lite"), true, shell).as_deref(),
            Some("cargo run --release -p rest-lite --")
        );
        assert_eq!(
            cargo_run_of(Path::new("/w/target/bench/rest-lite"), true, shell).as_deref(),
            Some("cargo run --profile bench -p rest-lite --")
        );
        // Without cargo's environment, or started by a test binary of the same build
        // (which has that environment too): not `cargo run`.
        assert_eq!(cargo_run_of(debug, false, shell), None);
        let test = Path::new("/w/target/debug/deps/integration-0123");
        assert_eq!(cargo_run_of(debug, true, Some(test)), None);
    }

    #[test]
    fn on_the_path_its_name_else_its_whole_path() {
        let dir = tempfile::tempdir().expect("dir");
        let exe = dir.path().join("rest-lite");
        std::fs::write(&exe, b"").expect("program");
        let other = tempfile::tempdir().expect("dir");
        std::fs::write(other.path().join("rest-lite"), b"").expect("another");
        let path = |dirs: &[&Path]| std::env::join_paths(dirs).ok();
        assert_eq!(program_of(path(&[dir.path()]), &exe), "rest-lite");
        // Another rest-lite first on the PATH: this one by its path.
        let canonical = std::fs::canonicalize(&exe).expect("canonical");
        assert_eq!(
            program_of(path(&[other.path(), dir.path()]), &exe),
            canonical.display().to_string()
        );
        assert_eq!(program_of(None, &exe), canonical.display().to_string());
    }

    #[test]
    fn on_the_host_the_same_command_with_engine_host() {
        let args = |line: &str| -> Vec<String> { words(line) };
        assert_eq!(
            with_engine_host(&args("run examples/a.yaml")),
            ["run", "--engine", "host", "examples/a.yaml"]
        );
        assert_eq!(
            with_engine_host(&args("serve --engine podman --listen 127.0.0.1:0")),
            ["serve", "--engine", "host", "--listen", "127.0.0.1:0"]
        );
        assert_eq!(
            with_engine_host(&args("run --engine=docker -- --engine")),
            ["run", "--engine", "host", "--", "--engine"]
        );
    }
}
