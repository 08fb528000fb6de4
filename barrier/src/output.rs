//! What the barrier leaves behind: the typed `peers.json` and, when it read the Framework
//! itself, `framework.json` (as frameworkbarrier does), each written whole or not at all.

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
