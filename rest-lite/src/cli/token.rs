//! `rest-lite token USER --file tokens.yaml`: a new random token for USER; its SHA-256
//! goes into the token file (created 0600 when missing), the token itself to standard
//! output, once: the file never holds it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use ring::rand::SecureRandom;

use pai_server::auth;
use pai_translate::spec::UserName;

#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    /// Whose token it is.
    user: String,
    /// The server's token file (`rest-lite serve --token-file`).
    #[arg(long, short, env = "REST_LITE_TOKEN_FILE")]
    file: PathBuf,
    /// The holder may act on every user's jobs.
    #[arg(long)]
    admin: bool,
    /// Add a token for a user who has one already (both then work, e.g. while the old
    /// one is being replaced); without it a second token for a user is refused.
    #[arg(long)]
    another: bool,
}

pub fn token(args: TokenArgs) -> Result<ExitCode> {
    UserName::parse(&args.user)
        .map_err(|rule| anyhow::anyhow!("user name {:?}: {rule}", args.user))?;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| anyhow::anyhow!("the system gave no random bytes"))?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();

    // The file as it is (it must be a valid one), with one more user entry.
    let mut text = match std::fs::read_to_string(&args.file) {
        Ok(text) => {
            let held = auth::Tokens::load(&args.file)?.of_user(&args.user);
            if held > 0 && !args.another {
                anyhow::bail!(
                    "user {} has a token in {} already: give --another to add one more (each then works), or remove the old entry first",
                    args.user,
                    args.file.display()
                );
            }
            text
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "users:\n".to_string(),
        Err(e) => {
            return Err(e).with_context(|| format!("reading {}", args.file.display()));
        }
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    if text.trim() == "users: []" {
        text = "users:\n".to_string();
    }
    text.push_str(&format!(
        "  - name: {}\n    tokenSha256: {}\n{}",
        args.user,
        auth::hash(&token),
        if args.admin { "    admin: true\n" } else { "" }
    ));
    // Written next to it, checked, then renamed over it: a mistake leaves the old file.
    let temporary = args.file.with_extension("new");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("writing {}", temporary.display()))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    if let Err(e) = auth::Tokens::load(&temporary) {
        let _ = std::fs::remove_file(&temporary);
        anyhow::bail!(
            "{} does not take one more entry at its end ({e}); add this one by hand:\n  - name: {}\n    tokenSha256: {}",
            args.file.display(),
            args.user,
            auth::hash(&token)
        );
    }
    std::fs::rename(&temporary, &args.file)
        .with_context(|| format!("replacing {}", args.file.display()))?;
    say!("{token}");
    tell!(
        "rest-lite: added a token for {}{} to {}; a running server reads it within seconds (on a cluster, from its Secret once the kubelet updated the mount, about a minute). Give it to the client with --token or REST_LITE_TOKEN, or sign in to the pages with it.",
        args.user,
        if args.admin { " (admin)" } else { "" },
        args.file.display()
    );
    Ok(ExitCode::SUCCESS)
}
