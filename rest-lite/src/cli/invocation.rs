//! How the person started this program, so that every command it prints runs as printed
//! where they are:
//! - under `cargo run`, the same `cargo run … --` they typed (its parent is cargo, whose
//!   command line says how: `-p rest-lite`, `--release`);
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
        program_of(
            parent_command_line().as_deref(),
            std::env::var_os("PATH"),
            &exe,
        )
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
    let args: Vec<String> = std::env::args().skip(1).collect();
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

/// The parent process's command line, its arguments as they were given.
fn parent_command_line() -> Option<Vec<String>> {
    let parent = nix::unistd::getppid();
    let bytes = std::fs::read(format!("/proc/{parent}/cmdline")).ok()?;
    Some(
        bytes
            .split(|&b| b == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect(),
    )
}

/// [`program`] from what it reads: the parent's command line, `PATH` and this program.
fn program_of(parent: Option<&[String]>, path: Option<OsString>, exe: &Path) -> String {
    if let Some(cargo) = parent.and_then(under_cargo) {
        return cargo;
    }
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

/// `cargo run …` as the parent's command line has it, up to the `--` that begins this
/// program's own arguments, if the parent is cargo running it (`cargo run` and `cargo r`;
/// cargo's path, or the interpreter a wrapper script has, left out).
fn under_cargo(parent: &[String]) -> Option<String> {
    let at = parent
        .iter()
        .take(2)
        .position(|arg| Path::new(arg).file_name().is_some_and(|n| n == "cargo"))?;
    let own: Vec<&str> = parent[at + 1..]
        .iter()
        .map(String::as_str)
        .take_while(|arg| *arg != "--")
        .collect();
    if !matches!(own.first(), Some(&"run" | &"r")) {
        return None;
    }
    let mut line = "cargo".to_string();
    for arg in own {
        line.push(' ');
        line.push_str(&shell_word(arg));
    }
    line.push_str(" --");
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn under_cargo_run_the_same_cargo_run_up_to_its_dashes() {
        let exe = Path::new("/nowhere/target/debug/rest-lite");
        for (parent, expected) in [
            (
                "cargo run -p rest-lite -- run examples/shell-hello.yaml",
                "cargo run -p rest-lite --",
            ),
            (
                "/root/.rustup/toolchains/stable/bin/cargo run --release -p rest-lite -- serve",
                "cargo run --release -p rest-lite --",
            ),
            ("cargo r -q -p rest-lite", "cargo r -q -p rest-lite --"),
            // A wrapper script named cargo, run by its interpreter.
            (
                "/bin/sh /usr/local/bin/cargo run -p rest-lite -- status",
                "cargo run -p rest-lite --",
            ),
        ] {
            assert_eq!(program_of(Some(&words(parent)), None, exe), expected);
        }
        // Cargo's test runner, or any other parent, is not `cargo run`.
        assert_eq!(
            program_of(Some(&words("cargo test --workspace")), None, exe),
            exe.display().to_string()
        );
    }

    #[test]
    fn on_the_path_its_name_else_its_whole_path() {
        let dir = tempfile::tempdir().expect("dir");
        let exe = dir.path().join("rest-lite");
        std::fs::write(&exe, b"").expect("program");
        let other = tempfile::tempdir().expect("dir");
        std::fs::write(other.path().join("rest-lite"), b"").expect("another");
        let shell = Some(words("-bash"));
        let path = |dirs: &[&Path]| std::env::join_paths(dirs).ok();
        assert_eq!(
            program_of(shell.as_deref(), path(&[dir.path()]), &exe),
            "rest-lite"
        );
        // Another rest-lite first on the PATH: this one by its path.
        let canonical = std::fs::canonicalize(&exe).expect("canonical");
        assert_eq!(
            program_of(shell.as_deref(), path(&[other.path(), dir.path()]), &exe),
            canonical.display().to_string()
        );
        assert_eq!(
            program_of(shell.as_deref(), None, &exe),
            canonical.display().to_string()
        );
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
