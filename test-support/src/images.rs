//! Images the tests and benches put into an engine's store (Podman's, Docker's), made
//! here from the static busybox (no registry can be reached), and taken out again: one
//! test's image when its [`Image`] drops, one shared by the tests of a process when the
//! process exits ([`shared`]). Every image made here carries the label [`LABEL`]: as the
//! process exits, the untagged images so labelled that nothing uses (an earlier, killed
//! run's, a tag imported again) are pruned, and nobody else's. Only then: an engine's
//! `load` makes an image untagged for a moment, and a prune beside a running test's
//! load would take it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The label of every image made here.
pub const LABEL: &str = "io.openpai.rest-lite.test";

/// An image in `engine`'s store, removed from it when dropped.
#[derive(Debug)]
pub struct Image {
    engine: &'static str,
    name: String,
}

impl Image {
    /// The image `name`, already in `engine`'s store (pulled by a test's job, say), to be
    /// removed with this guard.
    pub fn named(engine: &'static str, name: &str) -> Self {
        Self {
            engine,
            name: name.to_string(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Leaves the image in its store: it is someone else's to remove now.
    pub fn keep(self) {
        std::mem::forget(self)
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        remove(self.engine, &self.name);
    }
}

/// Removes `name` from `engine`'s store, if it is there.
pub fn remove(engine: &str, name: &str) {
    quiet(engine, &["rmi", "--force", name]);
}

/// Removes the untagged images made here that nothing uses.
fn prune(engine: &str) {
    let label = format!("label={LABEL}");
    quiet(engine, &["image", "prune", "--force", "--filter", &label]);
}

fn quiet(engine: &str, args: &[&str]) {
    let _ = Command::new(engine)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Whether `engine`'s store has `name`.
pub fn present(engine: &str, name: &str) -> bool {
    Command::new(engine)
        .args(["image", "inspect", name])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// busybox (`busybox`, a static build) and its applets in `dir/rootfs`, with the users
/// sshd needs.
pub fn busybox_root(dir: &Path, busybox: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    for sub in ["bin", "tmp", "etc", "root"] {
        std::fs::create_dir_all(root.join(sub)).expect("dir");
    }
    std::fs::copy(busybox, root.join("bin/busybox")).expect("busybox");
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534::/run/sshd:/bin/false\n",
    )
    .expect("passwd");
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n").expect("group");
    let applets = Command::new(busybox)
        .arg("--list")
        .output()
        .expect("busybox --list");
    for applet in String::from_utf8_lossy(&applets.stdout).lines() {
        if applet != "busybox" {
            let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
        }
    }
    root
}

/// `root` as the image `name` of `engine`, with Dockerfile instructions `changes`
/// (`USER 1000:1000`) and [`LABEL`]; the tar it is imported from is made in `dir`.
pub fn import(
    engine: &'static str,
    dir: &Path,
    root: &Path,
    name: &str,
    changes: &[&str],
) -> Image {
    let tar = dir.join("rootfs.tar");
    let status = Command::new("tar")
        .arg("-C")
        .arg(root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .expect("tar");
    assert!(status.success());
    let mut command = Command::new(engine);
    command.arg("import");
    let label = format!("LABEL {LABEL}=1");
    for change in changes.iter().copied().chain([label.as_str()]) {
        command.args(["--change", change]);
    }
    let out = command.arg(&tar).arg(name).output().expect("import");
    assert!(
        out.status.success(),
        "{engine} import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Image::named(engine, name)
}

/// The image `name` of `engine`, made by `make` once per process for all its tests, and
/// removed when the process exits (a passing run's, a failing one's too). The first in a
/// process also prunes the untagged images an earlier, killed run left.
pub fn shared(engine: &'static str, name: &str, make: impl FnOnce() -> Image) {
    static MADE: Mutex<Vec<(&'static str, String)>> = Mutex::new(Vec::new());
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if made.iter().any(|(e, n)| *e == engine && n == name) {
        return;
    }
    if !made.iter().any(|(e, _)| *e == engine) {
        // Registered first, so it runs last, once the shared images are gone.
        crate::at_exit::at_exit(move || prune(engine));
    }
    make().keep();
    made.push((engine, name.to_string()));
    let name = name.to_string();
    crate::at_exit::at_exit(move || remove(engine, &name));
}
