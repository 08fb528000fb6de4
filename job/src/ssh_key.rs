//! The key pair every job gets for ssh between its tasks: Ed25519, written in the forms
//! OpenSSH reads (`openssh-key-v1` for the private half, the one-line `ssh-ed25519 …`
//! for the public), so that neither the server nor the runtime image needs `ssh-keygen`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};

const KEY_TYPE: &[u8] = b"ssh-ed25519";

/// A job's key pair, and the host key pair every task's sshd presents: made once for the
/// job (no `ssh-keygen` per task), so its tasks can check each other's host key.
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey {
    /// `-----BEGIN OPENSSH PRIVATE KEY-----` …, unencrypted.
    pub private: String,
    /// `ssh-ed25519 AAAA… <comment>`.
    pub public: String,
    /// The tasks' host key (private half), in the same form.
    pub host_private: String,
    /// The tasks' host key (public half), in the same form.
    pub host_public: String,
    /// A v2 job's secrets (JSON), kept with the keys and as closely: the task's runtime
    /// renders `<% $secrets.… %>` from them. Never printed.
    pub secrets: Option<String>,
    /// The `.dockerconfigjson` of the job's image pull Secret (a v2 job's registry
    /// credentials); a cluster makes the Secret, this machine pulls no images.
    pub registry: Option<String>,
}

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobKey")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

/// The system's random source failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot make a key: the system's random source failed")]
pub struct KeyError;

impl JobKey {
    /// The files a task finds the keys in (a Secret's keys on a cluster, files of the
    /// job's directory here), with the mode each is written with: the private halves
    /// for their user alone.
    pub fn files(&self) -> Vec<(&'static str, &str, u32)> {
        use pai_contract::training::{
            JOB_HOST_KEY_FILE, JOB_HOST_PUBLIC_KEY_FILE, JOB_KEY_FILE, JOB_PUBLIC_KEY_FILE,
            JOB_SECRETS_FILE,
        };
        let mut files = vec![
            (JOB_KEY_FILE, self.private.as_str(), 0o600),
            (JOB_PUBLIC_KEY_FILE, self.public.as_str(), 0o644),
            (JOB_HOST_KEY_FILE, self.host_private.as_str(), 0o600),
            (JOB_HOST_PUBLIC_KEY_FILE, self.host_public.as_str(), 0o644),
        ];
        if let Some(secrets) = &self.secrets {
            files.push((JOB_SECRETS_FILE, secrets.as_str(), 0o600));
        }
        files
    }

    /// A fresh key pair; `comment` names it in `authorized_keys` (e.g. `alice~mnist`).
    pub fn generate(comment: &str) -> Result<Self, KeyError> {
        let (private, public) = fresh(comment)?;
        let (host_private, host_public) = fresh(&format!("{comment}~host"))?;
        Ok(Self {
            private,
            public,
            host_private,
            host_public,
            secrets: None,
            registry: None,
        })
    }
}

/// A fresh Ed25519 pair: (private, public) in OpenSSH's forms.
fn fresh(comment: &str) -> Result<(String, String), KeyError> {
    let rng = SystemRandom::new();
    let mut seed = [0u8; 32];
    rng.fill(&mut seed).map_err(|_| KeyError)?;
    let mut check = [0u8; 4];
    rng.fill(&mut check).map_err(|_| KeyError)?;
    from_seed(&seed, u32::from_be_bytes(check), comment)
}

/// The pair of `seed`; `check` is the private section's check number.
fn from_seed(seed: &[u8; 32], check: u32, comment: &str) -> Result<(String, String), KeyError> {
    {
        let pair = Ed25519KeyPair::from_seed_unchecked(seed).map_err(|_| KeyError)?;
        let public_key = pair.public_key().as_ref();
        let mut blob = Vec::new();
        put_string(&mut blob, KEY_TYPE);
        put_string(&mut blob, public_key);
        // The comment goes on one line of authorized_keys.
        let comment: String = comment
            .chars()
            .map(|c| {
                if c.is_whitespace() || c.is_control() {
                    '_'
                } else {
                    c
                }
            })
            .collect();

        let mut private = Vec::new();
        private.extend_from_slice(&check.to_be_bytes());
        private.extend_from_slice(&check.to_be_bytes());
        put_string(&mut private, KEY_TYPE);
        put_string(&mut private, public_key);
        let mut secret = seed.to_vec();
        secret.extend_from_slice(public_key);
        put_string(&mut private, &secret);
        put_string(&mut private, comment.as_bytes());
        // Padded to the cipher's block size ("none": 8) with 1, 2, 3, …
        let mut pad = 1u8;
        while private.len() % 8 != 0 {
            private.push(pad);
            pad += 1;
        }

        let mut body = b"openssh-key-v1\0".to_vec();
        put_string(&mut body, b"none");
        put_string(&mut body, b"none");
        put_string(&mut body, b"");
        body.extend_from_slice(&1u32.to_be_bytes());
        put_string(&mut body, &blob);
        put_string(&mut body, &private);

        let encoded = STANDARD.encode(&body);
        let mut pem = String::from("-----BEGIN OPENSSH PRIVATE KEY-----\n");
        for line in encoded.as_bytes().chunks(70) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END OPENSSH PRIVATE KEY-----\n");
        Ok((
            pem,
            format!("ssh-ed25519 {} {comment}", STANDARD.encode(&blob)),
        ))
    }
}

/// SSH's `string`: a 32-bit big-endian length, then the bytes.
fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_openssh_s() {
        let (private, public) = from_seed(&[7; 32], 0x0102_0304, "alice~job one").expect("key");
        assert!(public.starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"));
        assert!(public.ends_with(" alice~job_one"));
        let body: String = private
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let bytes = STANDARD.decode(body).expect("base64");
        assert!(bytes.starts_with(b"openssh-key-v1\0\0\0\0\x04none"));
        assert!(
            private
                .lines()
                .all(|l| l.len() <= 70 || l.starts_with("-----"))
        );
        // Two fresh keys differ, and a job's host key is not its user key.
        let (a, b) = (JobKey::generate("x"), JobKey::generate("x"));
        let (a, b) = (a.expect("a"), b.expect("b"));
        assert_ne!(a.public, b.public);
        assert_ne!(a.host_public, b.host_public);
        assert_ne!(a.public, a.host_public);
        assert!(a.host_public.ends_with(" x~host"));
    }

    /// OpenSSH itself reads the private key back to the same public key.
    #[test]
    fn ssh_keygen_derives_the_same_public_key() {
        let Some(keygen) = ["/usr/bin/ssh-keygen", "/usr/local/bin/ssh-keygen"]
            .into_iter()
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "ssh-keygen is missing (openssh-client); CI installs it"
            );
            // The shape of pai-test-support's skips (which this crate cannot use),
            // written past libtest's capture so that a plain `cargo test` shows it.
            let test = std::thread::current().name().unwrap_or("").to_string();
            let how = "apt-get install openssh-client";
            let line = format!("SKIPPED: {test}: needs ssh-keygen, which is missing: {how}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            return;
        };
        let key = JobKey::generate("test").expect("key");
        let dir = tempfile::Builder::new()
            .prefix("pai-key-")
            .tempdir()
            .expect("a scratch directory");
        let path = dir.path().join("id");
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
                .expect("open");
            f.write_all(key.private.as_bytes()).expect("write");
        }
        let out = std::process::Command::new(keygen)
            .arg("-y")
            .arg("-f")
            .arg(&path)
            .output()
            .expect("ssh-keygen runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let derived = String::from_utf8_lossy(&out.stdout);
        let mine: Vec<&str> = key.public.split(' ').take(2).collect();
        let theirs: Vec<&str> = derived.trim().split(' ').take(2).collect();
        assert_eq!(mine, theirs);
    }
}
