//! The job history on a cluster: a finished job's record outlives its Framework, in a
//! PostgreSQL database beside the cluster (as OpenPAI kept its job history, written from
//! FrameworkController's objects). Every replica of the server shares it.
//!
//! - Written when a Framework completes and its attempt history is written
//!   ([`crate::history`]): the Framework as it ended (without `managedFields`) and its
//!   list row; again whenever the completed Framework changes (its tags).
//! - Before retention deletes a Framework ([`crate::retention`]), its tasks' kept logs
//!   (the ConfigMaps of [`crate::log_keeper`], which go with the Framework) are copied in.
//! - Read once the Framework is gone: every list row from memory (the rows are loaded at
//!   start, about 1 KB a job); a job's Framework and its logs from the database when
//!   asked.
//! - A deleted job's record goes with it, and retention's bounds by count and age apply
//!   to the records.
//!
//! Two tables, made at start if missing (`rest_lite_jobs`, `rest_lite_logs`, keyed by
//! namespace, so that several installations may share a database). Backed up as any
//! PostgreSQL database is (`pg_dump`); a lost database loses the history of jobs whose
//! Frameworks are gone, nothing else.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::sync::broadcast;
use tokio_postgres::Client;

use crate::pg_tls::{MakeRustls, TlsParameters};

use pai_api::jobs::JobRow;
use pai_contract::Framework;

use crate::log_keeper::Kept;

/// The tables, made if missing.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS rest_lite_jobs (
    namespace text NOT NULL,
    name text NOT NULL,
    uid text NOT NULL,
    version text NOT NULL,
    ended_ms bigint NOT NULL,
    attempt integer NOT NULL,
    summary text NOT NULL,
    framework text NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE IF NOT EXISTS rest_lite_logs (
    namespace text NOT NULL,
    name text NOT NULL,
    config_map text NOT NULL,
    main bytea NOT NULL,
    init bytea NOT NULL,
    lost text NOT NULL,
    PRIMARY KEY (namespace, config_map),
    FOREIGN KEY (namespace, name) REFERENCES rest_lite_jobs (namespace, name) ON DELETE CASCADE
);
";

/// Deleted jobs' UIDs remembered, the latest.
const DELETED_KEPT: usize = 4096;

/// How long a connection may take to be made, and a sent request to go unacknowledged
/// by the database's host (TCP_USER_TIMEOUT, with keepalives as often) before the
/// connection is given up: a lost database fails reads and writes, it never hangs them.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const UNANSWERED: std::time::Duration = std::time::Duration::from_secs(30);

/// Why the history cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("the job history database ({place}) cannot be reached: {message}")]
    Unreachable { place: String, message: String },
    #[error("the job history database ({place}) failed: {message}")]
    Failed { place: String, message: String },
    /// Reached, and refused: TLS, a certificate or the credentials do not fit. Trying
    /// again does not help; the connection string has to change.
    #[error("the job history database ({place}) refused this server: {message}")]
    Refused { place: String, message: String },
    #[error("a record of the job history cannot be read: {0}")]
    Corrupt(String),
}

/// One finished job in the history, as kept in memory.
#[derive(Clone, Debug)]
pub struct Archived {
    /// Its list row.
    pub row: Arc<JobRow>,
    /// The UID of the Framework it was written from.
    pub uid: String,
    /// The Framework's resourceVersion it was written from.
    pub version: String,
    /// When it ended (ms since the epoch).
    pub ended_ms: i64,
    /// Its last attempt.
    pub attempt: i32,
}

/// A finished job's record as written: its entry and its two columns.
struct Record {
    name: String,
    archived: Archived,
    summary: String,
    framework: String,
    /// The history holds a record of another Framework of this name.
    replaces_another: bool,
}

/// The history of one namespace's jobs.
pub struct Archive {
    config: tokio_postgres::Config,
    /// What the connection string asks of TLS, and the connector that does it.
    tls: TlsParameters,
    connector: MakeRustls,
    /// Where it is, as messages say it (the host and database; never the password).
    place: String,
    namespace: String,
    client: tokio::sync::Mutex<Option<Client>>,
    rows: RwLock<HashMap<String, Archived>>,
    /// The UIDs of the Frameworks whose jobs this process deleted last (at most
    /// [`DELETED_KEPT`]): never written again (a change of one, seen before its
    /// deletion, may come after it).
    deleted: std::sync::Mutex<std::collections::VecDeque<String>>,
    /// Whether the rows were loaded; why not, if not.
    loaded: RwLock<Result<(), String>>,
    changes: broadcast::Sender<String>,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive")
            .field("place", &self.place)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// A record's two columns: `row` and `framework` as JSON.
fn encode(row: &JobRow, framework: &Framework) -> Result<(String, String), ArchiveError> {
    let json = |value: Result<String, serde_json::Error>| {
        value.map_err(|e| ArchiveError::Corrupt(e.to_string()))
    };
    Ok((
        json(serde_json::to_string(row))?,
        json(serde_json::to_string(framework))?,
    ))
}

/// When `framework` ended (ms since the epoch; 0 when it does not say).
pub fn ended_ms(framework: &Framework) -> i64 {
    framework
        .status
        .as_ref()
        .and_then(|s| pai_api::waiting::millis(s.completion_time.as_deref()))
        .unwrap_or(0)
}

impl Archive {
    /// The history in the database `connection` names (a libpq connection string or URL)
    /// for `namespace`; nothing is read until [`Archive::load`].
    pub fn new(connection: &str, namespace: &str) -> Result<Self, ArchiveError> {
        let unusable = |message: String| ArchiveError::Unreachable {
            place: "history.database".to_string(),
            message,
        };
        let (tls, rest) = crate::pg_tls::split(connection)
            .map_err(|e| unusable(format!("its TLS parameters: {e}")))?;
        let mut config: tokio_postgres::Config =
            rest.parse().map_err(|e: tokio_postgres::Error| {
                unusable(format!("not a PostgreSQL connection string: {e}"))
            })?;
        let connector = tls
            .connector()
            .map_err(|e| unusable(format!("its TLS parameters: {e}")))?;
        // As libpq: TLS is for TCP; a Unix socket is local, and the database offers no
        // TLS on it.
        let unix_only = !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| matches!(h, tokio_postgres::config::Host::Unix(_)));
        config.ssl_mode(match unix_only {
            true => tokio_postgres::config::SslMode::Disable,
            false => tls.negotiation(),
        });
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config
            .tcp_user_timeout(UNANSWERED)
            .keepalives_idle(UNANSWERED);
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .map(|h| match h {
                tokio_postgres::config::Host::Tcp(host) => host.clone(),
                tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
            })
            .collect();
        let place = format!(
            "{} at {}",
            config.get_dbname().unwrap_or("postgres"),
            if hosts.is_empty() {
                "localhost".to_string()
            } else {
                hosts.join(",")
            }
        );
        let (changes, _) = broadcast::channel(1024);
        Ok(Self {
            config,
            tls,
            connector,
            place,
            namespace: namespace.to_string(),
            client: tokio::sync::Mutex::new(None),
            rows: RwLock::new(HashMap::new()),
            deleted: Default::default(),
            loaded: RwLock::new(Err("not read yet".to_string())),
            changes,
        })
    }

    /// Where it is, for the start-up line and messages.
    pub fn place(&self) -> &str {
        &self.place
    }

    /// What the connection checks of the database, in words.
    pub fn checks(&self) -> String {
        self.tls.checks()
    }

    /// Connects once (a server's start): [`ArchiveError::Refused`] where the database
    /// refuses this server as configured, which trying again will not change.
    pub async fn connect(&self) -> Result<(), ArchiveError> {
        self.client().await.map(drop)
    }

    /// Connects, makes the tables if missing and reads every job's row; tried again by
    /// [`Archive::keep_loading`] until it succeeds.
    pub async fn load(&self) -> Result<usize, ArchiveError> {
        let result = self.read_rows().await;
        let mut loaded = self.loaded.write().unwrap_or_else(|p| p.into_inner());
        match &result {
            Ok(_) => *loaded = Ok(()),
            Err(e) => *loaded = Err(e.to_string()),
        }
        result
    }

    /// [`Archive::load`], with the server's back-off between tries, until it succeeds.
    pub async fn keep_loading(self: Arc<Self>) {
        let mut backoff = pai_contract::backoff::Backoff::new(pai_contract::backoff::SERVER);
        let mut said = false;
        loop {
            match self.load().await {
                Ok(jobs) => {
                    tracing::info!(history = %self.place, jobs, "job history read");
                    return;
                }
                Err(e) => {
                    if !said {
                        tracing::warn!(error = %e, "cannot read the job history; trying again with back-off");
                        said = true;
                    }
                    tokio::time::sleep(backoff.next_delay()).await;
                }
            }
        }
    }

    /// Whether the rows are read (lists are whole); why not, if not.
    pub fn ready(&self) -> Result<(), String> {
        self.loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Names of jobs whose history changed (written or deleted), from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    /// Finished job `name`'s entry, if the history has it.
    pub fn get(&self, name: &str) -> Option<Archived> {
        self.read().get(name).cloned()
    }

    /// Every job of the history, by Framework name.
    pub fn all(&self) -> Vec<(String, Archived)> {
        self.read()
            .iter()
            .map(|(name, archived)| (name.clone(), archived.clone()))
            .collect()
    }

    /// Whether the history holds `framework` as it is now (its UID and version).
    pub fn holds(&self, framework: &Framework) -> bool {
        self.read().get(framework.name()).is_some_and(|a| {
            Some(a.uid.as_str()) == framework.metadata.uid.as_deref()
                && Some(a.version.as_str()) == framework.metadata.resource_version.as_deref()
        })
    }

    /// Writes finished `framework`'s record (replacing the one of its name).
    pub async fn write(&self, framework: &Framework) -> Result<(), ArchiveError> {
        self.write_all(std::slice::from_ref(framework)).await
    }

    /// Writes the records of several finished Frameworks (each replacing the one of its
    /// name) in one transaction, the statements sent together (pipelined): the jobs a
    /// server finds completed at its start, a page at a time.
    pub async fn write_all(&self, frameworks: &[Framework]) -> Result<(), ArchiveError> {
        let records = frameworks
            .iter()
            .filter_map(|framework| self.record_of(framework).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        if records.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.failed(e))?;
        let (insert, delete) = futures::try_join!(
            transaction.prepare(
                "INSERT INTO rest_lite_jobs
                    (namespace, name, uid, version, ended_ms, attempt, summary, framework)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                ON CONFLICT (namespace, name) DO UPDATE SET uid = $3, version = $4,
                    ended_ms = $5, attempt = $6, summary = $7, framework = $8"
            ),
            transaction.prepare("DELETE FROM rest_lite_jobs WHERE namespace = $1 AND name = $2"),
        )
        .map_err(|e| self.failed(e))?;
        let writes = records.iter().map(|record| {
            let (transaction, insert, delete) = (&transaction, &insert, &delete);
            async move {
                // A record of another Framework of this name (deleted, and submitted
                // again) goes with its logs.
                if record.replaces_another {
                    transaction
                        .execute(delete, &[&self.namespace, &record.name])
                        .await?;
                }
                let archived = &record.archived;
                transaction
                    .execute(
                        insert,
                        &[
                            &self.namespace,
                            &record.name,
                            &archived.uid,
                            &archived.version,
                            &archived.ended_ms,
                            &archived.attempt,
                            &record.summary,
                            &record.framework,
                        ],
                    )
                    .await
            }
        });
        futures::future::try_join_all(writes)
            .await
            .map_err(|e| self.failed(e))?;
        transaction.commit().await.map_err(|e| self.failed(e))?;
        let mut rows = self.write_rows();
        for record in &records {
            rows.insert(record.name.clone(), record.archived.clone());
        }
        drop(rows);
        for record in records {
            let _ = self.changes.send(record.name);
        }
        Ok(())
    }

    /// What [`Archive::write_all`] writes of `framework`; `None`: its job was deleted
    /// by this process, and is never written again.
    fn record_of(&self, framework: &Framework) -> Result<Option<Record>, ArchiveError> {
        let mut kept = framework.clone();
        kept.metadata.managed_fields = None;
        let row = JobRow::unheld(&kept);
        let archived = Archived {
            row: Arc::new(row),
            uid: kept.metadata.uid.clone().unwrap_or_default(),
            version: kept.metadata.resource_version.clone().unwrap_or_default(),
            ended_ms: ended_ms(&kept),
            attempt: kept.attempt_id(),
        };
        if self
            .deleted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&archived.uid)
        {
            return Ok(None);
        }
        let (summary, framework) = encode(&archived.row, &kept)?;
        let name = kept.name().to_string();
        let replaces_another = self
            .get(&name)
            .is_some_and(|before| before.uid != archived.uid);
        Ok(Some(Record {
            name,
            archived,
            summary,
            framework,
            replaces_another,
        }))
    }

    /// Changes job `name`'s Framework in its record by `change` (whether it changed), read
    /// and written in one transaction under the row's lock: two replicas' changes are
    /// made one after the other. `None`: the history does not have it.
    pub async fn update<E>(
        &self,
        name: &str,
        change: impl FnOnce(&mut Framework) -> Result<bool, E>,
    ) -> Result<Option<Result<(), E>>, ArchiveError> {
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.failed(e))?;
        let row = transaction
            .query_opt(
                "SELECT framework FROM rest_lite_jobs WHERE namespace = $1 AND name = $2 FOR UPDATE",
                &[&self.namespace, &name],
            )
            .await
            .map_err(|e| self.failed(e))?;
        let Some(row) = row else { return Ok(None) };
        let text: String = row.get(0);
        let mut framework: Framework = serde_json::from_str(&text)
            .map_err(|e| ArchiveError::Corrupt(format!("job {name}: {e}")))?;
        match change(&mut framework) {
            Ok(true) => {}
            Ok(false) => return Ok(Some(Ok(()))),
            Err(e) => return Ok(Some(Err(e))),
        }
        let row = JobRow::unheld(&framework);
        let (summary, text) = encode(&row, &framework)?;
        transaction
            .execute(
                "UPDATE rest_lite_jobs SET summary = $3, framework = $4 WHERE namespace = $1 AND name = $2",
                &[&self.namespace, &name, &summary, &text],
            )
            .await
            .map_err(|e| self.failed(e))?;
        transaction.commit().await.map_err(|e| self.failed(e))?;
        if let Some(archived) = self.write_rows().get_mut(name) {
            archived.row = Arc::new(row);
        }
        let _ = self.changes.send(name.to_string());
        Ok(Some(Ok(())))
    }

    /// Writes kept logs of several jobs (`(job, key, log)`) in one transaction, the
    /// inserts sent together (pipelined): a page of a retirement's ConfigMaps at once.
    pub async fn write_logs_of(&self, logs: &[(String, String, Kept)]) -> Result<(), ArchiveError> {
        if logs.is_empty() {
            return Ok(());
        }
        let mut client = self.client().await?;
        let transaction = client.transaction().await.map_err(|e| self.failed(e))?;
        let statement = transaction
            .prepare(
                "INSERT INTO rest_lite_logs (namespace, name, config_map, main, init, lost)
                VALUES ($1, $2, $3, $4, $5, $6)
                ON CONFLICT (namespace, config_map) DO UPDATE SET main = $4, init = $5, lost = $6",
            )
            .await
            .map_err(|e| self.failed(e))?;
        let inserts = logs.iter().map(|(name, config_map, kept)| {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
                &self.namespace,
                name,
                config_map,
                &kept.main,
                &kept.init,
                &kept.lost,
            ];
            transaction.execute_raw(&statement, params)
        });
        futures::future::try_join_all(inserts)
            .await
            .map_err(|e| self.failed(e))?;
        transaction.commit().await.map_err(|e| self.failed(e))
    }

    /// The Framework of job `name` as it ended, if the history has it.
    pub async fn framework(&self, name: &str) -> Result<Option<Framework>, ArchiveError> {
        if self.get(name).is_none() {
            return Ok(None);
        }
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT framework FROM rest_lite_jobs WHERE namespace = $1 AND name = $2",
                &[&self.namespace, &name],
            )
            .await
            .map_err(|e| self.failed(e))?;
        let Some(row) = row else { return Ok(None) };
        let text: String = row.get(0);
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| ArchiveError::Corrupt(format!("job {name}: {e}")))
    }

    /// The log kept in ConfigMap `config_map` before its Framework went, if any.
    pub async fn kept(&self, config_map: &str) -> Result<Option<Kept>, ArchiveError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT main, init, lost FROM rest_lite_logs WHERE namespace = $1 AND config_map = $2",
                &[&self.namespace, &config_map],
            )
            .await
            .map_err(|e| self.failed(e))?;
        Ok(row.map(|row| Kept {
            main: row.get(0),
            init: row.get(1),
            lost: row.get(2),
        }))
    }

    /// Deletes job `name`'s record and logs; whether it had one.
    pub async fn delete(&self, name: &str) -> Result<bool, ArchiveError> {
        let client = self.client().await?;
        let deleted = self
            .execute(
                &client,
                "DELETE FROM rest_lite_jobs WHERE namespace = $1 AND name = $2",
                &[&self.namespace, &name],
            )
            .await?;
        let removed = self.write_rows().remove(name);
        if let Some(removed) = &removed {
            let mut deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner());
            if deleted.len() == DELETED_KEPT {
                deleted.pop_front();
            }
            deleted.push_back(removed.uid.clone());
        }
        let had = removed.is_some();
        let _ = self.changes.send(name.to_string());
        Ok(had || deleted > 0)
    }

    async fn read_rows(&self) -> Result<usize, ArchiveError> {
        let client = self.client().await?;
        client
            .batch_execute(SCHEMA)
            .await
            .map_err(|e| self.failed(e))?;
        let rows = client
            .query(
                "SELECT name, uid, version, ended_ms, attempt, summary FROM rest_lite_jobs WHERE namespace = $1",
                &[&self.namespace],
            )
            .await
            .map_err(|e| self.failed(e))?;
        let mut read = HashMap::with_capacity(rows.len());
        for row in rows {
            let name: String = row.get(0);
            let summary: String = row.get(5);
            let row_value: JobRow = match serde_json::from_str(&summary) {
                Ok(value) => value,
                Err(e) => {
                    tracing::warn!(job = %name, error = %e, "a job history record cannot be read; left out");
                    continue;
                }
            };
            read.insert(
                name,
                Archived {
                    row: Arc::new(row_value),
                    uid: row.get(1),
                    version: row.get(2),
                    ended_ms: row.get(3),
                    attempt: row.get(4),
                },
            );
        }
        let count = read.len();
        let names: Vec<String> = read.keys().cloned().collect();
        *self.write_rows() = read;
        for name in names {
            let _ = self.changes.send(name);
        }
        Ok(count)
    }

    /// The connection, made again if it was lost.
    async fn client(&self) -> Result<tokio::sync::MappedMutexGuard<'_, Client>, ArchiveError> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_none_or(|c| c.is_closed()) {
            let (client, connection) = self
                .config
                .connect(self.connector.clone())
                .await
                .map_err(|e| self.not_connected(&e))?;
            let place = self.place.clone();
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(history = %place, error = %e, "the job history database's connection ended");
                }
            });
            *guard = Some(client);
        }
        tokio::sync::MutexGuard::try_map(guard, |c| c.as_mut()).map_err(|_| {
            ArchiveError::Unreachable {
                place: self.place.clone(),
                message: "no connection".to_string(),
            }
        })
    }

    async fn execute(
        &self,
        client: &Client,
        statement: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, ArchiveError> {
        client
            .execute(statement, params)
            .await
            .map_err(|e| self.failed(e))
    }

    /// Why a connection could not be made, with the way out where it is the database
    /// refusing this server as configured.
    fn not_connected(&self, error: &tokio_postgres::Error) -> ArchiveError {
        match crate::pg_tls::refusal(error, &self.tls) {
            Some(message) => ArchiveError::Refused {
                place: self.place.clone(),
                message,
            },
            None => ArchiveError::Unreachable {
                place: self.place.clone(),
                message: error.to_string(),
            },
        }
    }

    fn failed(&self, error: tokio_postgres::Error) -> ArchiveError {
        if error.is_closed() {
            ArchiveError::Unreachable {
                place: self.place.clone(),
                message: error.to_string(),
            }
        } else {
            ArchiveError::Failed {
                place: self.place.clone(),
                message: error
                    .as_db_error()
                    .map_or_else(|| error.to_string(), |db| db.message().to_string()),
            }
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Archived>> {
        // No code holding the lock panics; a poisoned lock still has a whole map.
        self.rows.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write_rows(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Archived>> {
        self.rows.write().unwrap_or_else(|p| p.into_inner())
    }
}
