//! OpenPAI v1 with the job files people published: every file in `tests/fixtures/v1/`
//! (`tests/fixtures/v1-sources.json` names the repository, commit and path of each, and
//! why the few OpenPAI refused too are refused) is read and translated here, and what
//! each becomes is compared with what OpenPAI meant, by rules transcribed below from its
//! rest-server (microsoft/pai `src/rest-server/src/config/job.js` for the schema and its
//! defaults, `models/v1/job/yarn.js` `generateFrameworkDescription` for completion and
//! retries, `putJobAsync` for the directories' placeholders). Every field the file sets
//! that is not acted on must be named by a warning.

use crate::common;

use std::path::PathBuf;

use pai_contract::Framework;
use pai_translate::spec::{JobSpec, SpecFormat, document, v1_fields};
use serde_json::Value;

struct Fixture {
    file: String,
    text: String,
    /// Words of the error, for a file OpenPAI refused too.
    refused: Option<String>,
}

fn fixtures() -> Vec<Fixture> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let index: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("v1-sources.json")).expect("index"))
            .expect("index is JSON");
    let listed: Vec<String> = std::fs::read_dir(dir.join("v1"))
        .expect("fixtures")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed.len(), index.len(), "every fixture is in the index");
    index
        .iter()
        .map(|e| {
            let file = e["file"].as_str().expect("file").to_string();
            assert!(
                e["repo"].as_str().is_some_and(|r| r.contains('/'))
                    && e["commit"].as_str().is_some_and(|c| c.len() == 40)
                    && e["path"].as_str().is_some(),
                "{file} cites its repository, commit and path"
            );
            Fixture {
                text: std::fs::read_to_string(dir.join("v1").join(&file)).expect("read"),
                refused: e["refused"]["error"].as_str().map(str::to_string),
                file,
            }
        })
        .collect()
}

/// OpenPAI's `x || default` and Joi's defaults, over the raw document.
fn int(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
}

/// Checks one accepted file against OpenPAI's meaning of it.
fn compare(file: &str, doc: &Value, spec: &JobSpec, framework: &Framework) {
    let roles = doc["taskRoles"].as_array().expect("roles");
    // killAllOnCompletedTaskNumber, as its documentation meant it ("completed tasks to
    // kill the entire job"), counted per role.
    let kill_all = int(&doc["killAllOnCompletedTaskNumber"]).filter(|n| *n > 0);
    // Retries: yarn.js `fancyRetryPolicy = retryCount !== -2`, `maxRetryCount: retryCount`.
    let retry = int(&doc["retryCount"]).unwrap_or(0);
    let policy = &framework.spec.retry_policy;
    assert_eq!(policy.max_retry_count as i64, retry, "{file}: retries");
    assert_eq!(
        policy.fancy_retry_policy,
        retry != -2,
        "{file}: fancy policy"
    );
    assert_eq!(framework.spec.task_roles.len(), roles.len(), "{file}");
    for (i, r) in roles.iter().enumerate() {
        let role = &framework.spec.task_roles[i];
        assert_eq!(role.pai_name(), r["name"].as_str().unwrap(), "{file}");
        // Joi's defaults: one task, one CPU, 100 MB, 64 MB of shm, no GPU.
        let tasks = int(&r["taskNumber"]).unwrap_or(1);
        assert_eq!(i64::from(role.task_number), tasks, "{file}: taskNumber");
        let env = common::main_env(framework, i);
        let get = |name: &str| common::get(&env, name).map(str::to_string);
        assert_eq!(
            get("PAI_CURRENT_TASK_ROLE_CPU_COUNT"),
            Some(int(&r["cpuNumber"]).unwrap_or(1).to_string()),
            "{file}: cpuNumber"
        );
        assert_eq!(
            get("PAI_CURRENT_TASK_ROLE_MEM_MB"),
            Some(int(&r["memoryMB"]).unwrap_or(100).to_string()),
            "{file}: memoryMB"
        );
        assert_eq!(
            get("PAI_CURRENT_TASK_ROLE_SHM_MB"),
            Some(int(&r["shmMB"]).unwrap_or(64).to_string()),
            "{file}: shmMB"
        );
        assert_eq!(
            get("PAI_CURRENT_TASK_ROLE_GPU_COUNT"),
            Some(int(&r["gpuNumber"]).unwrap_or(0).to_string()),
            "{file}: gpuNumber"
        );
        // Completion (FrameworkLauncher's ApplicationCompletionPolicy): minFailedTaskCount
        // default 1, null never; minSucceededTaskCount default null (every task), or the
        // killAllOnCompletedTaskNumber's count, at most the role's tasks.
        let completion = &role.framework_attempt_completion_policy;
        let min_failed = match r.get("minFailedTaskCount") {
            None => 1,
            Some(Value::Null) => -1,
            Some(v) => int(v).unwrap(),
        };
        assert_eq!(
            i64::from(completion.min_failed_task_count),
            min_failed,
            "{file}: minFailedTaskCount"
        );
        let min_succeeded = match r.get("minSucceededTaskCount") {
            None if kill_all.is_some() => kill_all.unwrap().min(tasks),
            None | Some(Value::Null) => -1,
            Some(v) => int(v).unwrap(),
        };
        assert_eq!(
            i64::from(completion.min_succeeded_task_count),
            min_succeeded,
            "{file}: minSucceededTaskCount"
        );
        // Ports: each label with its count.
        for port in r["portList"].as_array().into_iter().flatten() {
            let label = port["label"].as_str().unwrap();
            let count = int(&port["portNumber"]).unwrap_or(1) as usize;
            let list = get(&format!("PAI_CONTAINER_HOST_{label}_PORT_LIST"))
                .unwrap_or_else(|| panic!("{file}: port {label}"));
            assert_eq!(list.split(',').count(), count, "{file}: port {label}");
            if let Some(begin) = int(&port["beginAt"]).filter(|b| *b != 0) {
                assert!(list.starts_with(&begin.to_string()), "{file}: beginAt");
            }
        }
        // The command, exactly.
        assert_eq!(
            common::get(&common::init_env(framework, i), "USER_CMD"),
            r["command"].as_str(),
            "{file}: command"
        );
        // The directories with OpenPAI's placeholders filled (`putJobAsync`); the job's
        // own variables as written, but where the platform sets the name.
        for (field, var) in [
            ("dataDir", "PAI_DATA_DIR"),
            ("outputDir", "PAI_OUTPUT_DIR"),
            ("codeDir", "PAI_CODE_DIR"),
        ] {
            let want = doc[field]
                .as_str()
                .unwrap_or("")
                .replace("$PAI_DEFAULT_FS_URI", "")
                .replace("$PAI_JOB_NAME", spec.name().as_str())
                .replace("$PAI_USER_NAME", "alice")
                .replace("$PAI_USERNAME", "alice");
            assert_eq!(get(var), Some(want), "{file}: {field}");
        }
        for (name, value) in doc["jobEnvs"].as_object().into_iter().flatten() {
            if pai_contract::env::is_set_by_platform(name) {
                continue;
            }
            let want = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            assert_eq!(get(name), Some(want), "{file}: jobEnvs.{name}");
        }
    }
}

/// The fields a file sets that are not done as OpenPAI did them: each must be named.
fn must_be_warned(doc: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for field in ["gpuType", "authFile"] {
        if doc[field].as_str().is_some_and(|s| !s.is_empty()) {
            out.push(field.to_string());
        }
    }
    if doc["extras"].as_object().is_some_and(|m| !m.is_empty()) {
        out.push("extras".to_string());
    }
    if doc.get("killAllOnCompletedTaskNumber").is_some() {
        out.push("killAllOnCompletedTaskNumber".to_string());
    }
    for (name, _) in doc["jobEnvs"].as_object().into_iter().flatten() {
        if ["isDebug", "paiAzRDMA"].contains(&name.as_str())
            || pai_contract::env::is_set_by_platform(name)
        {
            out.push(format!("jobEnvs.{name}"));
        }
    }
    out
}

#[test]
fn every_published_v1_file_is_accepted_as_openpai_meant_it() {
    let files = fixtures();
    assert!(files.len() >= 200, "{} fixtures", files.len());
    let (mut accepted, mut with_comments, mut warned) = (0, 0, 0);
    for f in &files {
        let parsed = JobSpec::parse(&f.text, SpecFormat::Json);
        match (parsed, &f.refused) {
            (Ok(spec), None) => {
                let doc = document(&f.text, SpecFormat::Json).expect("document");
                let framework =
                    common::transform(&f.text, 1).unwrap_or_else(|e| panic!("{}: {e}", f.file));
                common::assert_cluster_accepts(&framework);
                compare(&f.file, &doc, &spec, &framework);
                let mut notes = pai_translate::warnings::spec_warnings(&spec);
                let user = pai_translate::spec::UserName::parse("alice").expect("user");
                let config = pai_translate::config::ClusterConfig::default();
                let place = pai_translate::place::Place::Cluster(&config);
                notes.extend(pai_translate::place::check(&spec, &user, place).unwrap_or_default());
                for field in must_be_warned(&doc) {
                    assert!(
                        notes.iter().any(|n| n.starts_with(&field)),
                        "{}: {field} is not acted on as OpenPAI did and no warning names it: {notes:?}",
                        f.file
                    );
                    warned += 1;
                }
                accepted += 1;
                with_comments += usize::from(serde_json::from_str::<Value>(&f.text).is_err());
            }
            (Err(e), Some(why)) => assert!(e.to_string().contains(why.as_str()), "{}: {e}", f.file),
            (Ok(_), Some(_)) => panic!("{} should be refused", f.file),
            (Err(e), None) => panic!("{} refused: {e}", f.file),
        }
    }
    assert!(accepted >= 218, "{accepted} accepted");
    assert!(
        with_comments >= 80,
        "{with_comments} files with comments accepted"
    );
    assert!(warned >= 50, "{warned} fields warned about");
}

#[test]
fn the_reference_shows_the_field_table_the_validator_uses() {
    let reference = std::fs::read_to_string(common::repo_root().join("docs/reference.md"))
        .expect("docs/reference.md");
    let table = v1_fields::markdown();
    assert!(
        reference.contains(&table),
        "docs/reference.md's v1 field table differs from translate/src/spec/v1_fields.rs; paste this:\n{table}"
    );
}

#[test]
fn code_dirs_are_checked_for_the_place_they_run_in() {
    use pai_translate::config::ClusterConfig;
    use pai_translate::place::{Place, check};
    use pai_translate::spec::UserName;
    let scratch = pai_test_support::scratch("v1-place");
    let code = scratch.path().join("code");
    std::fs::create_dir_all(&code).expect("scratch");
    let user = UserName::parse("alice").expect("user");
    let spec = |code_dir: &str, cluster: &str| {
        let mut v = common::base_job();
        v["codeDir"] = Value::from(code_dir);
        v["virtualCluster"] = Value::from(cluster);
        JobSpec::parse(&v.to_string(), SpecFormat::Json).expect("valid")
    };
    let error = |r: Result<Vec<String>, pai_translate::spec::SpecErrors>| {
        r.expect_err("refused").to_string()
    };
    let here = code.to_string_lossy().into_owned();
    // This machine: its own directory works, as a path or a file:// URI.
    assert_eq!(
        check(
            &spec(&here, "default"),
            &user,
            Place::ThisMachine { default_fs_uri: "" }
        )
        .unwrap(),
        Vec::<String>::new()
    );
    check(
        &spec(&format!("file://{here}"), "default"),
        &user,
        Place::ThisMachine { default_fs_uri: "" },
    )
    .expect("file://");
    let missing = error(check(
        &spec("/no/such/code", "default"),
        &user,
        Place::ThisMachine { default_fs_uri: "" },
    ));
    assert!(
        missing.contains("codeDir: /no/such/code cannot be read"),
        "{missing}"
    );
    let relative = error(check(
        &spec("code", "default"),
        &user,
        Place::ThisMachine { default_fs_uri: "" },
    ));
    assert!(relative.contains("neither a directory"), "{relative}");
    // A cluster cannot read a directory of the machine one submits from, nor HDFS
    // without a file system configured; with one, the image must bring the client.
    let mut config = ClusterConfig::default();
    let local = error(check(
        &spec(&here, "default"),
        &user,
        Place::Cluster(&config),
    ));
    assert!(
        local.contains("a directory of the machine you submit from"),
        "{local}"
    );
    let no_fs = error(check(
        &spec("$PAI_DEFAULT_FS_URI/alice/code", "default"),
        &user,
        Place::Cluster(&config),
    ));
    assert!(
        no_fs.contains(
            "this cluster's server has none configured: set defaultFsUri in the server's config"
        ),
        "{no_fs}"
    );
    // On this machine the same, with the way out: the config file's key.
    let here_no_fs = error(check(
        &spec("$PAI_DEFAULT_FS_URI/alice/code", "default"),
        &user,
        Place::ThisMachine { default_fs_uri: "" },
    ));
    assert!(
        here_no_fs.contains("this machine's server has none configured: set defaultFsUri in a config file given to `rest-lite serve --config FILE`"),
        "{here_no_fs}"
    );
    config.default_fs_uri = "hdfs://namenode:9000".to_string();
    let warnings = check(
        &spec("$PAI_DEFAULT_FS_URI/$PAI_USER_NAME/code", "default"),
        &user,
        Place::Cluster(&config),
    )
    .expect("accepted");
    assert!(
        warnings[0].contains("hdfs://namenode:9000/alice/code is fetched with `hdfs dfs -get`"),
        "{warnings:?}"
    );
    // A template's image name is no image for a cluster; this machine pulls none.
    let mut template = common::base_job();
    template["image"] = Value::from("<your image name>");
    let template = JobSpec::parse(&template.to_string(), SpecFormat::Json).expect("accepted");
    check(&template, &user, Place::ThisMachine { default_fs_uri: "" })
        .expect("nothing is pulled here");
    let image = error(check(&template, &user, Place::Cluster(&config)));
    assert!(
        image.contains("image: \"<your image name>\" is not an image reference"),
        "{image}"
    );
    // A virtual cluster's name that is no queue, where there are no queues, is said.
    let typo = check(
        &spec("", "defualt"),
        &user,
        Place::ThisMachine { default_fs_uri: "" },
    )
    .expect("accepted");
    assert!(
        typo[0].contains("\"defualt\" (did you mean \"default\"?) names no queue"),
        "{typo:?}"
    );
}
