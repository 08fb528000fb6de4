//! What every handler shares: the backend, the transformer, who may call, the limits.

use std::sync::Arc;

use pai_translate::transform::Transformer;

/// Default limit of a request body: 1 MiB.
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// How long a watch lasts without `timeoutSeconds` (as the Kubernetes API server ends
/// its watches after a while): the client watches again to go on.
pub const DEFAULT_WATCH_SECONDS: u32 = 1800;

/// How often the views of Frameworks no one holds any more are let go.
const VIEWS_SWEPT_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

#[derive(Clone)]
pub struct AppState {
    pub backend: Arc<dyn pai_backend::backend::Backend>,
    /// What makes Frameworks of specs, by the config as it is now.
    pub transformer: Arc<crate::live::Live<Transformer>>,
    pub body_limit: usize,
    /// Who may call.
    pub access: crate::auth::Access,
    /// The host names it answers to besides addresses and `localhost`.
    pub hosts: Arc<crate::guard::Hosts>,
    /// Whether it is served over TLS (the sign-in cookie is then `Secure`).
    pub tls: bool,
    /// Whether `/metrics` is served on its own listener (`--metrics-listen`) and so not
    /// on this one.
    pub metrics_elsewhere: bool,
    /// How long a job watch lasts when the client gives no `timeoutSeconds`.
    pub watch_limit: std::time::Duration,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Jobs' views, made once per version and shared by every reader.
    pub views: Arc<crate::views::Views>,
    /// The jobs in list order, kept as they change: what lists read.
    pub index: Arc<crate::index::JobIndex>,
    /// Where this server's tokens are, as the sign-in page says it.
    pub token_hint: Arc<str>,
    /// The team storages now (the config's, read again when it changes).
    pub storages: Arc<pai_translate::storages::Registry>,
}

impl AppState {
    /// A server over `backend` making Frameworks by `config`, callers admitted by
    /// `access`: the default body limit, no other host names, plain HTTP, fresh metrics.
    pub fn new(
        backend: Arc<dyn pai_backend::backend::Backend>,
        config: pai_translate::config::ClusterConfig,
        access: crate::auth::Access,
    ) -> Self {
        let holds = backend.clone();
        // Jobs that wait for jobs first: nothing else holds them (their pods are gated).
        let views = crate::views::Views::holding(Arc::new(move |f| {
            pai_backend::depends::held(holds.as_ref(), f).or_else(|| holds.held(f))
        }));
        let views = Arc::new(views);
        crate::views::Views::sweep_every(&views, VIEWS_SWEPT_EVERY);
        Self {
            index: Arc::new(crate::index::JobIndex::new(backend.clone(), views.clone())),
            backend,
            storages: Arc::new(pai_translate::storages::Registry::new(
                config.storages.clone(),
            )),
            transformer: Arc::new(crate::live::Live::new(Transformer::new(config))),
            body_limit: DEFAULT_BODY_LIMIT,
            access,
            hosts: Default::default(),
            tls: false,
            metrics_elsewhere: false,
            watch_limit: std::time::Duration::from_secs(u64::from(DEFAULT_WATCH_SECONDS)),
            metrics: Default::default(),
            views,
            token_hint: Arc::from(
                "The token is the one you use with rest-lite --token; the server's operator makes one with rest-lite token USER.",
            ),
        }
    }
}
