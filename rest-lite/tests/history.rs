//! Finished jobs over a server's life: the retention deletes the oldest past its bound,
//! and a restarted server still knows, and serves, every job it kept.

use serde_json::json;

use crate::common;
use common::fifo::final_view;
use common::serve::{DEADLINE, Server};
use pai_client::{Client, ClientError, Source};
use pai_translate::spec::SpecFormat;

fn spec(name: &str) -> String {
    json!({
        "jobName": name, "image": "busybox",
        "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
            "command": format!("echo output of {name}")}],
    })
    .to_string()
}

async fn names(client: &Client) -> Vec<String> {
    let mut names: Vec<String> = client
        .jobs(None)
        .await
        .expect("list")
        .into_iter()
        .map(|j| j.name)
        .collect();
    names.sort();
    names
}

/// Asks for the list until `done` holds of it (the retention runs beside the requests):
/// each try is a request, no fixed pause decides anything.
async fn list_until(client: &Client, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let names = names(client).await;
        if done(&names) || tokio::time::Instant::now() > deadline {
            return names;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn log_of(client: &Client, job: &str) -> Result<String, ClientError> {
    let stream = client
        .logs("alice", job, "worker", 0, false, Source::User)
        .await?;
    Ok(common::read_all(stream).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_jobs_past_the_retention_go_and_a_restart_keeps_the_rest() {
    let dir = common::scratch("history", "retention");
    // Run-only files go at a job's end here (an hour after it by default).
    let config = "retention: {finishedJobs: 2, taskFilesKeptSec: 0}\n";
    let server = Server::in_dir_with_config(&dir, config);
    let client = server.client();
    for i in 0..4 {
        let name = format!("h{i}");
        client
            .submit("alice", &spec(&name), SpecFormat::Json)
            .await
            .expect("submitted");
        let view = final_view(&client, "alice", &name).await;
        assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    }
    // The two that ended first go; the two newest stay.
    let kept = list_until(&client, |names| names.len() <= 2).await;
    assert_eq!(kept, ["h2", "h3"]);
    for gone in ["h0", "h1"] {
        assert!(
            matches!(
                client.job("alice", gone).await,
                Err(ClientError::Api { status: 404, .. })
            ),
            "{gone} is gone from the job reads"
        );
        assert!(
            matches!(
                log_of(&client, gone).await,
                Err(ClientError::Api { status: 404, .. })
            ),
            "{gone} is gone from the log reads"
        );
    }
    let state = dir.join("state").join("jobs");
    let dirs: Vec<std::path::PathBuf> = std::fs::read_dir(&state)
        .expect("jobs")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(dirs.len(), 2, "the deleted jobs' files are gone");
    // A finished task keeps its logs; what it needed to run goes (as its job's
    // controller ends, beside the requests).
    for job in &dirs {
        let task = job.join("attempts/0/worker-0");
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while task.join("main.sh").exists() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let mut left: Vec<String> = std::fs::read_dir(&task)
            .expect("task")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["container.log", "logs"], "{}", task.display());
        let records = dir
            .join("state/pids")
            .join(job.file_name().expect("a name"));
        assert!(!records.exists(), "{}", records.display());
    }
    // A restart: the kept jobs, their state, attempts and logs, all there.
    server.kill();
    let server = Server::in_dir_with_config(&dir, config);
    let client = server.client();
    assert_eq!(names(&client).await, ["h2", "h3"]);
    for job in ["h2", "h3"] {
        let view = client.job("alice", job).await.expect("read");
        assert_eq!(view.job_status.state.as_str(), "SUCCEEDED");
        assert_eq!(view.job_status.app_exit_code, Some(0));
        let log = log_of(&client, job).await.expect("log");
        assert!(log.contains(&format!("output of {job}")), "{log}");
    }
    let attempts = common::request(
        &server.url,
        "GET",
        "/api/v2/jobs/alice~h3/attempts/0",
        &[(
            "Authorization",
            &format!("Bearer {}", server.token.clone().expect("token")),
        )],
        "",
    );
    assert_eq!(attempts.status, 200, "{}", attempts.body);
    assert!(attempts.body.contains("SUCCEEDED"), "{}", attempts.body);
}

mod cluster {
    //! On a cluster, against the test API server and a real PostgreSQL server. What it
    //! does not prove: FrameworkController's own deletion of a completed attempt's pods
    //! and the garbage collector's of a deleted Framework's ConfigMaps (the test does
    //! both by hand, as they would).

    use std::path::Path;

    use base64::Engine;
    use serde_json::json;

    use super::{log_of, names};
    use crate::common;
    use common::serve::{DEADLINE, Server};
    use pai_client::{Client, ClientError, Source};
    use pai_contract::framework::CompletionStatus;
    use pai_test_support::ApiServer;
    use pai_test_support::postgres::Postgres;
    use pai_translate::spec::SpecFormat;

    const NS: &str = "history";
    const TOKEN: &str = "alice-token";
    const BOB: &str = "bob-token";

    struct Place {
        api: ApiServer,
        dir: common::Scratch,
    }

    impl Place {
        fn serve(&self) -> Server {
            let kubeconfig = self.dir.join("kubeconfig");
            let tokens =
                common::token_file(&self.dir, &[("alice", TOKEN, false), ("bob", BOB, false)]);
            Server::start_kube_with_config(
                &kubeconfig,
                NS,
                &tokens,
                Some(&self.dir.join("config.yaml")),
            )
        }

        fn framework(job: &str) -> String {
            pai_job::names::framework_name("alice", job)
        }

        /// A server on the test API server with `postgres` as its history (scratch
        /// directory `name`), and alice's client of it.
        async fn open(postgres: &Postgres, name: &str) -> (Self, Server, Client) {
            let dir = common::scratch("history", name);
            let api = ApiServer::start().await;
            api.write_kubeconfig(&dir.join("kubeconfig"), Some(NS));
            write_config(&dir, &postgres.connection());
            let place = Place { api, dir };
            let server = place.serve();
            let client = Client::new(&server.url, Some(TOKEN.to_string()));
            (place, server, client)
        }

        /// [`Place::open`], and job `job` submitted to it.
        async fn serving(postgres: &Postgres, name: &str, job: &str) -> (Self, Server, Client) {
            let (place, server, client) = Self::open(postgres, name).await;
            client
                .submit("alice", &spec(job), SpecFormat::Json)
                .await
                .expect("submitted");
            (place, server, client)
        }

        /// Attempt `attempt` of `job` ends with `code` at `second` past the hour; the
        /// last ends the job.
        fn end_attempt(&self, job: &str, attempt: i32, code: i32, second: u32, last: bool) {
            self.api
                .modify("frameworks", NS, &Self::framework(job), |f| {
                    f["status"]["state"] = json!(if last {
                        "Completed"
                    } else {
                        "AttemptCompleted"
                    });
                    f["status"]["attemptStatus"]["id"] = json!(attempt);
                    f["status"]["retryPolicyStatus"]["totalRetriedCount"] = json!(attempt);
                    let at = format!("2026-01-01T00:00:{second:02}Z");
                    f["status"]["attemptStatus"]["completionTime"] = json!(at);
                    f["status"]["attemptStatus"]["completionStatus"] = serde_json::to_value(
                        CompletionStatus::of(code, format!("exit code {code}")),
                    )
                    .expect("json");
                    if last {
                        f["status"]["completionTime"] = json!(at);
                    }
                });
        }

        /// A task's kept log, as the server's log keeper writes it when the task ends.
        fn keep_log(&self, job: &str, attempt: i32, text: &str) {
            let framework = Self::framework(job);
            let pod = format!("{framework}-worker-0");
            let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
            let name = pai_contract::kept_logs::config_map(&framework);
            use pai_contract::kept_logs::{Part, key};
            let (main, init) = (
                key(&pod, attempt, Part::Main),
                key(&pod, attempt, Part::Init),
            );
            if self.api.get("configmaps", NS, &name).is_some() {
                self.api.modify("configmaps", NS, &name, |m| {
                    m["binaryData"][&main] = json!(b64(text));
                    m["binaryData"][&init] = json!(b64(""));
                });
                return;
            }
            // As the server's log keeper makes it.
            self.create_log_map(&name, &main, &init, text);
        }

        /// Creates ConfigMap `name`, labelled as rest-lite's, holding a task's log `text`
        /// under key `main` and an empty init log under key `init`.
        fn create_log_map(&self, name: &str, main: &str, init: &str, text: &str) {
            let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
            self.api.create(
                "configmaps",
                NS,
                json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "labels": {
                        pai_contract::meta::LABEL_MANAGED_BY: pai_contract::meta::MANAGED_BY,
                    }},
                    "binaryData": {main: b64(text), init: b64("")},
                }),
            );
        }

        /// Waits until the history holds `job`'s end and its Framework is gone, then
        /// removes its kept-log ConfigMaps as the garbage collector would.
        async fn retired(&self, job: &str) {
            let name = Self::framework(job);
            tokio::time::timeout(DEADLINE, self.api.wait_gone("frameworks", NS, &name))
                .await
                .expect("the Framework deleted once the history holds it");
            for map in self.api.list("configmaps", NS) {
                let map_name = map["metadata"]["name"].as_str().unwrap_or_default();
                if map_name == pai_contract::kept_logs::config_map(&name) {
                    self.api.delete("configmaps", NS, map_name);
                }
            }
        }
    }

    fn spec(job: &str) -> String {
        json!({
            "jobName": job, "image": "busybox",
            "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
                "command": "echo hi"}],
        })
        .to_string()
    }

    fn write_config(dir: &Path, database: &str) {
        std::fs::write(
            dir.join("config.yaml"),
            format!(
                "history: {{database: \"{database}\", frameworkKeptSec: 0}}\nretention: {{finishedJobs: 2}}\n"
            ),
        )
        .expect("config");
    }

    // Long: one job's whole life in the history (two attempts, retired, restarted
    // over, a tag changed, deleted) beside the retention of the oldest.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deleted_frameworks_job_stays_listed_and_read_from_the_history() {
        let Some(postgres) = Postgres::start() else {
            return;
        };
        let (place, server, client) = Place::open(&postgres, "cluster").await;

        // "old" ends first; "flaky" fails attempt 0 (its end written into the Framework's
        // history), then succeeds in attempt 1.
        for job in ["old", "flaky"] {
            client
                .submit("alice", &spec(job), SpecFormat::Json)
                .await
                .expect("submitted");
        }
        place.keep_log("old", 0, "output of old\n");
        place.end_attempt("old", 0, 0, 5, true);
        place.retired("old").await;
        place.keep_log("flaky", 0, "attempt 0 of flaky\n");
        place.end_attempt("flaky", 0, 1, 10, false);
        place
            .api
            .wait_for("frameworks", NS, &Place::framework("flaky"), |f| {
                f["metadata"]["annotations"][pai_job::attempts::ANNOTATION].is_string()
            })
            .await;
        place.keep_log("flaky", 1, "attempt 1 of flaky\n");
        place.end_attempt("flaky", 1, 0, 20, true);
        place.retired("flaky").await;

        // Listed (v1 and v2), read with its attempts, its logs from the history.
        assert_eq!(names(&client).await, ["flaky", "old"]);
        let check = |client: Client| async move {
            let view = client.job("alice", "flaky").await.expect("read");
            assert_eq!(view.job_status.state.as_str(), "SUCCEEDED");
            assert_eq!(view.job_status.retries, 1);
            let attempts = &view.job_status.attempts;
            assert_eq!(attempts.len(), 2, "{attempts:?}");
            assert_eq!((attempts[0].attempt, attempts[0].exit_code), (0, 1));
            let log = log_of(&client, "flaky").await.expect("the log");
            assert!(log.contains("attempt 1 of flaky"), "{log}");
            let earlier = client
                .attempt_logs("alice", "flaky", "worker", 0, 0, Source::User)
                .await
                .expect("attempt 0's log");
            let earlier = common::read_all(earlier).await;
            assert!(earlier.contains("attempt 0 of flaky"), "{earlier}");
        };
        check(client.clone()).await;
        // Another user sees nothing of a job in the history: not listed, its job and
        // log reads 404.
        let bob = Client::new(&server.url, Some(BOB.to_string()));
        assert_eq!(names(&bob).await, Vec::<String>::new());
        assert!(matches!(
            bob.job("alice", "flaky").await,
            Err(ClientError::Api { status: 404, .. })
        ));
        assert!(matches!(
            log_of(&bob, "flaky").await,
            Err(ClientError::Api { status: 404, .. })
        ));
        let v2 = common::request(
            &server.url,
            "GET",
            "/api/v2/jobs?withTotalCount=true",
            &[("Authorization", &format!("Bearer {TOKEN}"))],
            "",
        );
        assert_eq!(v2.status, 200, "{}", v2.body);
        let v2: serde_json::Value = serde_json::from_str(&v2.body).expect("json");
        assert_eq!(v2["totalCount"], 2, "{v2:#}");

        // A restart reads the history again.
        server.kill();
        let server = place.serve();
        let client = Client::new(&server.url, Some(TOKEN.to_string()));
        assert_eq!(names(&client).await, ["flaky", "old"]);
        check(client.clone()).await;

        // A third finished job: past `finishedJobs: 2`, the oldest end goes from the
        // history.
        client
            .submit("alice", &spec("new"), SpecFormat::Json)
            .await
            .expect("submitted");
        place.end_attempt("new", 0, 0, 30, true);
        place.retired("new").await;
        let deadline = tokio::time::Instant::now() + DEADLINE;
        while names(&client).await.contains(&"old".to_string())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(names(&client).await, ["flaky", "new"]);
        assert!(matches!(
            client.job("alice", "old").await,
            Err(ClientError::Api { status: 404, .. })
        ));

        // Its name stays taken until it is deleted; then it is gone from every read and
        // from the database.
        let again = client
            .submit("alice", &spec("flaky"), SpecFormat::Json)
            .await;
        assert!(
            matches!(again, Err(ClientError::Api { status: 409, .. })),
            "{again:?}"
        );
        client.delete("alice", "flaky").await.expect("deleted");
        assert_eq!(names(&client).await, ["new"]);
        assert!(matches!(
            client.job("alice", "flaky").await,
            Err(ClientError::Api { status: 404, .. })
        ));
        assert!(matches!(
            log_of(&client, "flaky").await,
            Err(ClientError::Api { status: 404, .. })
        ));
        assert_eq!(
            postgres.psql("SELECT name FROM rest_lite_jobs ORDER BY name"),
            Place::framework("new")
        );
        assert_eq!(postgres.psql("SELECT count(*) FROM rest_lite_logs"), "0");
    }

    /// A job an earlier version made, whose runtime kept each task's log in a ConfigMap of
    /// its own, retires with those logs: the retention finds the earlier version's mark on
    /// its containers (`PAI_RUNTIME_KEPT_LOG_BYTES`), reads the task's ConfigMap by name
    /// and copies it into the history, from which the log is read once both are gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_versions_per_task_kept_log_retires_into_the_history() {
        let Some(postgres) = Postgres::start() else {
            return;
        };
        let (place, _server, client) = Place::serving(&postgres, "legacy", "legacy").await;
        let framework = Place::framework("legacy");
        let pod = format!("{framework}-worker-0");
        place.api.modify("frameworks", NS, &framework, |f| {
            let container = &mut f["spec"]["taskRoles"][0]["task"]["pod"]["spec"]["containers"][0];
            let env = container["env"]
                .as_array_mut()
                .expect("the main container's env");
            env.push(json!({"name": "PAI_RUNTIME_KEPT_LOG_BYTES", "value": "262144"}));
        });
        use pai_contract::kept_logs::{Part, legacy_config_map, legacy_key};
        let legacy = legacy_config_map(&pod);
        // As an earlier version's runtime wrote it at the task's end.
        place.create_log_map(
            &legacy,
            &legacy_key(0, Part::Main),
            &legacy_key(0, Part::Init),
            "what an earlier version kept\n",
        );
        place.end_attempt("legacy", 0, 0, 5, true);
        place.retired("legacy").await;
        // Gone with its Framework, as the garbage collector deletes what it owns.
        place.api.delete("configmaps", NS, &legacy);
        let log = log_of(&client, "legacy").await.expect("the log");
        assert_eq!(log, "what an earlier version kept\n");
        assert_eq!(postgres.psql("SELECT count(*) FROM rest_lite_logs"), "1");
    }

    /// A job that ends while the history's database is down is written once it is back,
    /// and its Framework stays in the cluster until then.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_ended_while_the_history_is_down_is_recorded_once_back_and_only_then_retired() {
        let Some(mut postgres) = Postgres::start() else {
            return;
        };
        let (place, server, client) = Place::serving(&postgres, "down", "late").await;
        postgres.stop();
        place.keep_log("late", 0, "output of late\n");
        place.end_attempt("late", 0, 0, 5, true);
        server
            .logged("cannot write a finished job into the history")
            .await;
        assert!(
            place
                .api
                .get("frameworks", NS, &Place::framework("late"))
                .is_some(),
            "retired with nothing kept"
        );
        postgres.restart();
        place.retired("late").await;
        let held = postgres.psql(&format!(
            "SELECT count(*) FROM rest_lite_jobs WHERE name = '{}'",
            Place::framework("late")
        ));
        assert_eq!(held, "1");
        let view = client
            .job("alice", "late")
            .await
            .expect("read from the history");
        assert_eq!(view.job_status.state.as_str(), "SUCCEEDED");
        assert_eq!(
            log_of(&client, "late").await.expect("log"),
            "output of late\n"
        );
    }

    /// Jobs that ended while no server ran are found at the next server's start,
    /// written into the history together, and retired with their logs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_that_ended_while_no_server_ran_are_recorded_at_the_next_start() {
        let Some(postgres) = Postgres::start() else {
            return;
        };
        let (place, server, client) = Place::serving(&postgres, "unwatched", "first").await;
        // Two: the config's retention keeps two finished jobs.
        let jobs = ["first", "second"];
        for job in &jobs[1..] {
            client
                .submit("alice", &spec(job), SpecFormat::Json)
                .await
                .expect("submitted");
        }
        server.kill();
        for (second, job) in jobs.iter().enumerate() {
            place.keep_log(job, 0, &format!("output of {job}\n"));
            place.end_attempt(job, 0, second as i32, second as u32, true);
        }
        let server = place.serve();
        let client = Client::new(&server.url, Some(TOKEN.to_string()));
        for job in jobs {
            place.retired(job).await;
        }
        assert_eq!(postgres.psql("SELECT count(*) FROM rest_lite_jobs"), "2");
        assert_eq!(names(&client).await, ["first", "second"]);
        let view = client.job("alice", "second").await.expect("read");
        assert_eq!(view.job_status.state.as_str(), "FAILED");
        assert_eq!(view.job_status.app_exit_code, Some(1));
        assert_eq!(
            log_of(&client, "second").await.expect("log"),
            "output of second\n"
        );
    }

    /// A Framework whose attempt history cannot be written (an admission webhook refuses
    /// the server's patches) is recorded with its last attempt all the same, and retired.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_job_whose_attempt_history_is_never_written_is_recorded_all_the_same() {
        let Some(postgres) = Postgres::start() else {
            return;
        };
        let (place, server, client) = Place::serving(&postgres, "unwritten", "unwritten").await;
        place
            .api
            .reject_patches_of("frameworks", Some("denied by the cluster's policy"));
        place.end_attempt("unwritten", 0, 3, 7, true);
        server.logged("cannot write the attempt history").await;
        place.retired("unwritten").await;
        let view = client.job("alice", "unwritten").await.expect("read");
        assert_eq!(view.job_status.state.as_str(), "FAILED");
        let attempts = &view.job_status.attempts;
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert_eq!((attempts[0].attempt, attempts[0].exit_code), (0, 3));
    }
}

mod tls {
    //! TLS to the job history's PostgreSQL, against a real server with `ssl = on`: a CA,
    //! the database's certificate and a client's, made here.

    use pai_cluster::archive::{Archive, ArchiveError};
    use pai_test_support::postgres::{OnTcp, Postgres, ServerTls};

    use crate::common;

    /// A CA, and what it signs.
    struct Ca {
        issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
        pem: String,
    }

    impl Ca {
        fn new(name: &str) -> Self {
            let key = rcgen::KeyPair::generate().expect("ca key");
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            let pem = params.self_signed(&key).expect("ca").pem();
            Self {
                issuer: rcgen::Issuer::new(params, key),
                pem,
            }
        }

        /// A certificate for `names`, with `common_name`; its PEM and its key's.
        fn sign(&self, names: &[&str], common_name: &str) -> (String, String) {
            let key = rcgen::KeyPair::generate().expect("key");
            let mut params = rcgen::CertificateParams::new(
                names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            )
            .expect("params");
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, common_name);
            let cert = params.signed_by(&key, &self.issuer).expect("cert");
            (cert.pem(), key.serialize_pem())
        }
    }

    /// Connects as `connection` says: the reason it was refused, if it was.
    async fn refusal(connection: &str) -> Option<String> {
        let archive = Archive::new(connection, "ns").expect("a usable connection string");
        match archive.connect().await {
            Ok(()) => {
                // Reads and writes work over it.
                archive.load().await.expect("the history read");
                None
            }
            Err(ArchiveError::Refused { message, .. }) => Some(message),
            Err(other) => panic!("{connection}: not a refusal: {other}"),
        }
    }

    /// Connects as `connection` says, and checks it is refused with each of `words`.
    async fn refused_saying(connection: &str, words: &[&str]) {
        let said = refusal(connection).await.expect("refused");
        for word in words {
            assert!(said.contains(word), "{connection}: {said}");
        }
    }

    // Long: one database, every mode against it, each with what it must say.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_history_connects_as_libpq_sslmode_says_and_refuses_with_the_way_out() {
        let dir = common::scratch("history", "tls");
        let ca = Ca::new("history CA");
        let (cert, key) = ca.sign(&["db.test"], "db.test");
        let (client_cert, client_key) = ca.sign(&[], "certuser");
        let other = Ca::new("another CA");
        let file = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("file");
            path.display().to_string()
        };
        let (ca_file, other_file) = (file("ca.pem", &ca.pem), file("other.pem", &other.pem));
        let (client_cert, client_key) = (
            file("client.pem", &client_cert),
            file("client.key", &client_key),
        );
        let Some(postgres) = Postgres::start_tcp(&OnTcp {
            tls: Some(ServerTls {
                cert: &cert,
                key: &key,
                client_ca: Some(&ca.pem),
            }),
            hba: &[
                "hostssl all postgres 127.0.0.1/32 trust",
                "hostssl all certuser 127.0.0.1/32 cert",
            ],
        }) else {
            return;
        };
        postgres.psql("CREATE ROLE certuser LOGIN SUPERUSER");
        let at = |user: &str, host: &str, more: &str| postgres.tcp_connection(user, host, more);

        // verify-full: the CA and the name.
        let full = at(
            "postgres",
            "db.test",
            &format!("sslmode=verify-full sslrootcert={ca_file}"),
        );
        assert_eq!(refusal(&full).await, None);
        // The same as a URL.
        let port = full
            .split("port=")
            .nth(1)
            .and_then(|p| p.split(' ').next())
            .expect("port");
        let url = format!(
            "postgresql://postgres@db.test:{port}/postgres?hostaddr=127.0.0.1&sslmode=verify-full&sslrootcert={}",
            ca_file.replace('/', "%2F")
        );
        assert_eq!(refusal(&url).await, None);
        // Another CA: refused, saying which to give.
        let wrong_ca = at(
            "postgres",
            "db.test",
            &format!("sslmode=verify-full sslrootcert={other_file}"),
        );
        refused_saying(
            &wrong_ca,
            &["not signed by a CA this server trusts", "sslrootcert"],
        )
        .await;
        // Another name: refused by verify-full, taken by verify-ca.
        let wrong_name = at(
            "postgres",
            "other.test",
            &format!("sslmode=verify-full sslrootcert={ca_file}"),
        );
        refused_saying(&wrong_name, &["not for the host", "verify-ca"]).await;
        let ca_only = at(
            "postgres",
            "other.test",
            &format!("sslmode=verify-ca sslrootcert={ca_file}"),
        );
        assert_eq!(refusal(&ca_only).await, None);
        // require and prefer encrypt without checking; libpq's default is prefer.
        for mode in ["sslmode=require", "sslmode=prefer", ""] {
            assert_eq!(
                refusal(&at("postgres", "other.test", mode)).await,
                None,
                "{mode}"
            );
        }
        // This database takes TCP only over TLS: disable is refused, saying so.
        let disable = at("postgres", "db.test", "sslmode=disable");
        refused_saying(&disable, &["only over TLS", "sslmode=require"]).await;
        // A client certificate: its user gets in with it, not without.
        let with_cert = at(
            "certuser",
            "db.test",
            &format!(
                "sslmode=verify-full sslrootcert={ca_file} sslcert={client_cert} sslkey={client_key}"
            ),
        );
        assert_eq!(refusal(&with_cert).await, None);
        let without = at(
            "certuser",
            "db.test",
            &format!("sslmode=verify-full sslrootcert={ca_file}"),
        );
        refused_saying(&without, &["client certificate", "sslcert="]).await;
        // A connection made with TLS is over TLS, as the database sees it.
        let archive = Archive::new(&with_cert, "ns").expect("archive");
        archive.connect().await.expect("connected");
        let encrypted = postgres.psql(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) WHERE usename = 'certuser' AND ssl",
        );
        assert_eq!(encrypted, "1");
        drop(archive);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_database_without_tls_is_refused_where_tls_is_required_never_used_plain() {
        let Some(postgres) = Postgres::start_tcp(&OnTcp {
            tls: None,
            hba: &["host all all 127.0.0.1/32 trust"],
        }) else {
            return;
        };
        for mode in ["require", "verify-ca", "verify-full"] {
            let connection =
                postgres.tcp_connection("postgres", "db.test", &format!("sslmode={mode}"));
            refused_saying(&connection, &["does not offer TLS", "ssl = on"]).await;
        }
        // prefer goes on without it, as libpq's.
        let prefer = postgres.tcp_connection("postgres", "db.test", "sslmode=prefer");
        assert_eq!(refusal(&prefer).await, None);
    }

    /// A server whose history refuses it as configured does not start: it says why and
    /// what to change.
    #[test]
    fn a_server_refused_by_its_history_says_why_and_does_not_start() {
        let Some(postgres) = Postgres::start_tcp(&OnTcp {
            tls: None,
            hba: &["host all all 127.0.0.1/32 trust"],
        }) else {
            return;
        };
        let dir = common::scratch("history", "refused");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        let api = rt.block_on(pai_test_support::ApiServer::start());
        let kubeconfig = dir.join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, Some("history"));
        let database = postgres.tcp_connection("postgres", "db.test", "sslmode=require");
        let config = dir.join("config.yaml");
        std::fs::write(&config, format!("history: {{database: \"{database}\"}}\n"))
            .expect("config");
        let tokens = common::token_file(&dir, &[("alice", "alice-token", false)]);
        let output = common::rest_lite_command()
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--backend",
                "kube",
                "--namespace",
                "history",
            ])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--token-file")
            .arg(&tokens)
            .arg("--config")
            .arg(&config)
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("rest-lite serve");
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{said}");
        assert!(
            said.contains("refused this server") && said.contains("does not offer TLS"),
            "{said}"
        );
        drop(api);
    }
}
