//! OpenPAI's official JavaScript SDK, `@microsoft/openpai-js-sdk` 0.1.5 from npm, unchanged,
//! against the real `rest-lite serve` on this machine: `tests/sdk/openpai-sdk.js` submits
//! a protocol v2 job, lists it, reads it and its config, finds a task's ssh address as
//! the SDK's `pai ssh` does, reads a task and its log, tags it and finds it by its tag,
//! stops it, and sees a bad job refused. Needs Node.js and the SDK (`npm ci --prefix rest-lite/tests/sdk`, which
//! `.ci/run` does); says what is missing and skips without them, except under `CI=true`.

use crate::common;

use std::path::PathBuf;

use common::serve::Server;
use pai_test_support::needs;

const TOKEN: &str = "sdk-user-token";

fn sdk_dir() -> PathBuf {
    common::repo_root().join("rest-lite/tests/sdk")
}

#[test]
fn openpais_sdk_submits_reads_stops_and_logs_a_v2_job() {
    if !needs::present(
        "node",
        needs::program("node").is_some(),
        "apt-get install nodejs npm",
    ) || !needs::present(
        "the OpenPAI SDK from npm",
        sdk_dir()
            .join("node_modules/@microsoft/openpai-js-sdk/package.json")
            .is_file(),
        "npm ci --prefix rest-lite/tests/sdk",
    ) {
        return;
    }
    let dir = common::scratch("sdk", "job");
    let tokens = common::token_file(&dir, &[("alice", TOKEN, false)]);
    // Two GPUs, stated (no device is opened): the job's two tasks take one each.
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "gpus:\n  devices:\n    - {index: 0, uuid: GPU-sdk-0}\n    - {index: 1, uuid: GPU-sdk-1}\nstorages:\n  - {name: sdk-team, default: true}\n  - {name: sdk-scratch, share: false}\n  - {name: sdk-other, users: [carol]}\n",
    )
    .expect("config");
    let server = Server::start_with_tokens_and_config(&dir.join("state"), &tokens, Some(&config));
    let run = common::node::run(
        &sdk_dir(),
        "openpai-sdk.js",
        &[
            ("REST_LITE_URL", server.url.as_ref()),
            ("REST_LITE_TOKEN", TOKEN.as_ref()),
            ("REST_LITE_USER", "alice".as_ref()),
        ],
    );
    let step = |name: &str| run.get(name);
    let stdout = &run.stdout;
    assert_eq!(step("submit")["message"], "job sdk_job submitted");
    assert_eq!(step("list")["protocolVersion"], "2");
    assert_eq!(step("list")["totalTaskNumber"], 2);
    assert_eq!(step("list")["totalGpuNumber"], 2);
    // The SDK's storage calls: alice's storages, her defaults, one of them.
    assert_eq!(
        step("storages")["names"],
        serde_json::json!(["sdk-team", "sdk-scratch"])
    );
    assert_eq!(
        step("storages")["defaults"],
        serde_json::json!(["sdk-team"])
    );
    assert_eq!(
        step("storages")["detail"],
        serde_json::json!({"name": "sdk-team", "share": true, "type": "unknown", "volumeName": "sdk-team"})
    );
    // OpenPAI's bit per GPU: task 0 and task 1 on one GPU each, not the same one.
    let mut bits: Vec<u64> = step("get")["containerGpus"]
        .as_array()
        .expect("a value per task")
        .iter()
        .map(|b| b.as_u64().expect("bits"))
        .collect();
    bits.sort();
    assert_eq!(bits, [1, 2]);
    assert_eq!(step("get")["state"], "RUNNING");
    assert_eq!(step("get")["username"], "alice");
    // The config as submitted, the secret masked as OpenPAI masks it.
    assert_eq!(step("config")["secrets"], "******");
    assert_eq!(step("config")["parameters"]["word"], "hello");
    assert!(!stdout.contains("sdk-secret-value"), "{stdout}");
    // The ssh address the SDK finds is a task's sshd (run by the runtime on demand).
    let ssh = step("ssh");
    assert_eq!(ssh["ip"], "127.0.0.1");
    if needs::present(
        "sshd",
        needs::program("sshd").is_some(),
        "apt-get install openssh-server",
    ) {
        assert!(
            ssh["banner"]
                .as_str()
                .is_some_and(|b| b.starts_with("SSH-2.0-")),
            "{ssh}"
        );
    }
    assert_eq!(step("task")["state"], "RUNNING");
    let logs = step("logs");
    assert_eq!(logs["names"], serde_json::json!(["all", "runtime"]));
    assert_eq!(logs["text"], "ready hello 1\n");
    assert_eq!(
        step("tags")["tagged"],
        serde_json::json!([["sdk_job", ["sdk-tag"]]])
    );
    assert_eq!(step("tags")["untagged"], 0);
    assert_eq!(step("stopped")["state"], "STOPPED");
    let refused = step("refused");
    assert_eq!(refused["status"], 400);
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains("name: \"bad job\" breaks")),
        "{refused}"
    );
    step("done");
    drop(server);
}
