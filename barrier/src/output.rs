//! What the barrier leaves behind: the typed `peers.json` and, when it read the Framework
//! itself, `framework.json` (as frameworkbarrier does), each written whole or not at all;
//! the `barrier` binary also leaves frameworkbarrier's `injector.sh`.

use std::path::Path;

use pai_contract::Framework;
use pai_contract::paths::files;

use crate::peers::PeerTable;

/// Writes `peers.json` and, given the Framework, `framework.json` into `dir`.
pub fn write(dir: &Path, framework: Option<&Framework>, peers: &PeerTable) -> std::io::Result<()> {
    if let Some(framework) = framework {
        write_json(&dir.join(files::FRAMEWORK_JSON), framework)?;
    }
    write_json(&dir.join(files::PEERS_JSON), peers)
}

/// Writes frameworkbarrier's `injector.sh` for `peers` into `dir` (mode 0755, as
/// frameworkbarrier makes it), whole or not at all. Only the `barrier` binary writes it:
/// a task of ours reads its peers from `peers.json` and its environment files.
pub fn write_injector(dir: &Path, peers: &PeerTable) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(crate::injector::FILE);
    let tmp = dir.join(format!("{}.tmp", crate::injector::FILE));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(&tmp)?;
    file.write_all(crate::injector::script(peers).as_bytes())?;
    std::fs::rename(&tmp, path)
}

/// Serialises `value` next to `path` and renames it into place: readers see the old file
/// or the new one, whole. Not synced: these files live as long as the pod, which a
/// machine's crash ends anyway.
pub fn write_json(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    use std::io::Write;
    let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(&bytes)?;
    std::fs::rename(&tmp, path)
}
