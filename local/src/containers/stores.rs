//! The other engine's image store on this machine. A person who has both engines loads an
//! image into one (`docker load`, `podman pull`) and expects a job to find it whichever
//! engine runs its tasks; a kubelet's `IfNotPresent` means "on this node", not "in this
//! one store". So before a registry is asked, an image the running engine lacks is copied
//! from the other engine's store, when that engine answers and has it (the engines' own
//! save and load, through a docker-archive in the state directory, removed after). The
//! other engine is looked for once, at the first image the running one lacks.

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;

use super::driver::Driver;

/// An engine's store, as the messages name it.
pub struct Store {
    /// Its engine's name and version (`Docker Engine 28.2.2`, `Podman 5.4.2`).
    pub name: String,
    driver: Box<dyn Driver>,
}

impl Store {
    pub fn new(name: String, driver: Box<dyn Driver>) -> Self {
        Self { name, driver }
    }
}

/// Finds the engines other than the running one that answer here.
pub type Finder = Box<dyn Fn() -> BoxFuture<'static, Vec<Store>> + Send + Sync>;

/// The other engines' stores, looked for once, when first needed.
pub struct Elsewhere {
    finder: Finder,
    found: tokio::sync::OnceCell<Vec<Store>>,
    /// Where the archives lie while they are copied (`<state dir>/images`).
    scratch: PathBuf,
}

impl std::fmt::Debug for Elsewhere {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .found
            .get()
            .map(|stores| stores.iter().map(|s| s.name.as_str()).collect())
            .unwrap_or_default();
        f.debug_struct("Elsewhere").field("found", &names).finish()
    }
}

/// What a look in the other stores found.
pub enum Copied {
    /// The image is in the running engine's store now, copied from another's.
    Here,
    /// No other store has it: the stores that answered, by name.
    Nowhere(Vec<String>),
}

impl Elsewhere {
    pub fn new(finder: Finder, scratch: PathBuf) -> Self {
        // Archives a killed server left half-copied.
        if let Ok(entries) = std::fs::read_dir(&scratch) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with("copy-") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Self {
            finder,
            found: tokio::sync::OnceCell::new(),
            scratch,
        }
    }

    async fn stores(&self) -> &[Store] {
        self.found.get_or_init(|| (self.finder)()).await
    }

    /// Copies `image` into `to` from the first other store that has it, telling `tell`
    /// first. A copy that fails is an error with the engines' words.
    pub async fn copy(
        &self,
        image: &str,
        to: &dyn Driver,
        tell: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<Copied, String> {
        let stores = self.stores().await;
        // A docker-archive keeps names, not digests: a reference by digest is pulled.
        if image.contains('@') {
            return Ok(Copied::Nowhere(
                stores.iter().map(|s| s.name.clone()).collect(),
            ));
        }
        for store in stores {
            // A store that cannot be asked is as one without the image: the pull's
            // message names it among those looked in.
            if !store.driver.has_image(image).await.unwrap_or(false) {
                continue;
            }
            let short = store.name.split(" (").next().unwrap_or(&store.name);
            tell(&format!("copying it from {short}'s store"));
            tracing::info!(%image, from = %store.name, "copying an image from the other engine's store");
            let archive = Archive::new(&self.scratch)?;
            store
                .driver
                .save(image, archive.path())
                .await
                .map_err(|why| format!("cannot copy it from {}'s store: {why}", store.name))?;
            to.load(archive.path())
                .await
                .map_err(|why| format!("cannot copy it from {}'s store: {why}", store.name))?;
            // Loaded under the name the other engine gave it, which must be the one the
            // job asks for.
            if !to.has_image(image).await.unwrap_or(false) {
                return Err(format!(
                    "copied from {}'s store, but not found under its name afterwards",
                    store.name
                ));
            }
            return Ok(Copied::Here);
        }
        Ok(Copied::Nowhere(
            stores.iter().map(|store| store.name.clone()).collect(),
        ))
    }
}

/// A docker-archive's path while an image is copied: a new name in the scratch folder,
/// removed when dropped (a copy that failed half-way too).
struct Archive(PathBuf);

impl Archive {
    fn new(scratch: &Path) -> Result<Self, String> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(scratch)
            .map_err(|e| format!("cannot make {}: {e}", scratch.display()))?;
        let name = format!("copy-{}.tar", uuid::Uuid::new_v4().simple());
        Ok(Self(scratch.join(name)))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Archive {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
