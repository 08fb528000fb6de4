//! Builds the task runtime statically (glibc with `+crt-static`, as the cluster's init
//! image has it) and embeds it, so that a `rest-lite` installed anywhere can run tasks in
//! any container image, one without glibc too. The build is the one
//! `kube-runtime/tests/static_chroot.rs` makes, in `<target>/static` with the same flags, so
//! the two share it.
//!
//! `REST_LITE_STATIC_RUNTIME=<path>` embeds a runtime built elsewhere instead;
//! `REST_LITE_STATIC_RUNTIME=none` embeds none (tasks then run on the host only).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The static runtime's flags, encoded as cargo passes them (`\x1f` between arguments):
/// the chroot test sets the same value, so both builds are one.
const STATIC_FLAGS: &str = "-C\x1ftarget-feature=+crt-static";
const TARGET: &str = "x86_64-unknown-linux-gnu";

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let embedded = out.join("kube-runtime");
    println!("cargo:rerun-if-env-changed=REST_LITE_STATIC_RUNTIME");
    let chosen = std::env::var("REST_LITE_STATIC_RUNTIME").ok();
    let built = match chosen.as_deref() {
        Some("none") => None,
        Some(path) => {
            println!("cargo:rerun-if-changed={path}");
            Some(PathBuf::from(path))
        }
        None if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("x86_64")
            || std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") =>
        {
            println!(
                "cargo:warning=no static task runtime for this target; tasks run on the host only"
            );
            None
        }
        None => build_static(&out),
    };
    match built {
        Some(path) => {
            std::fs::copy(&path, &embedded)
                .unwrap_or_else(|e| panic!("copying {}: {e}", path.display()));
            // Debug information is most of a debug build's size; without `strip` the
            // binary is embedded as it is.
            let _ = Command::new("strip").arg(&embedded).status();
        }
        None => std::fs::write(&embedded, b"").expect("writing OUT_DIR"),
    }
}

/// `cargo build -p pai-kube-runtime` for the target with `+crt-static`, in
/// `<target>/static`; returns the binary. A machine that cannot build it (no static C
/// library, say) still builds rest-lite, which then runs tasks on the host only and says
/// so; the warning names the cause.
fn build_static(out: &Path) -> Option<PathBuf> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let workspace = manifest.parent().expect("the crate lives in the workspace");
    for dir in ["kube-runtime", "barrier", "contract"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(dir).join("src").display()
        );
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(dir).join("Cargo.toml").display()
        );
    }
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("Cargo.lock").display()
    );
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<crate>-<hash>/out.
    let profile_dir = out
        .ancestors()
        .find(|p| p.file_name().is_some_and(|n| n == "build"))
        .and_then(Path::parent)
        .expect("OUT_DIR lies under <profile>/build");
    let target_dir = profile_dir
        .parent()
        .expect("the profile's directory has a parent")
        .join("static");
    let release = std::env::var("PROFILE").as_deref() == Ok("release");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--locked",
            "-p",
            "pai-kube-runtime",
            "--bin",
            "kube-runtime",
        ])
        .args(["--target", TARGET])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(workspace)
        .env("CARGO_ENCODED_RUSTFLAGS", STATIC_FLAGS)
        // Clippy's driver, when this runs under `cargo clippy`, is no compiler for it.
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTFLAGS");
    if release {
        command.arg("--release");
    }
    match command.status() {
        Ok(status) if status.success() => Some(
            target_dir
                .join(TARGET)
                .join(if release { "release" } else { "debug" })
                .join("kube-runtime"),
        ),
        outcome => {
            println!(
                "cargo:warning=the static task runtime did not build ({outcome:?}; libc6-dev has the static C library it links): this rest-lite runs tasks on the host only"
            );
            None
        }
    }
}
