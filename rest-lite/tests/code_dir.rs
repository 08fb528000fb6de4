//! v1's `codeDir`, and v1 jobs as OpenPAI's users wrote them: the code is fetched into
//! the task's working directory (from a path, or from HDFS with its client), the command
//! runs under bash, and code this machine cannot reach is refused before anything runs.

use crate::common;

use serde_json::json;

use common::jobs::{job, role, run_spec};

fn scratch(name: &str) -> common::Scratch {
    common::scratch("code", name)
}

/// A v1 job as OpenPAI's users wrote them (comments, a role name with '-', numbers as
/// strings, `codeDir`, a bash-only command, fields not acted on): it runs its code from
/// the task's working directory under bash, and every field not acted on is named.
#[test]
fn a_v1_job_as_people_wrote_it_runs_its_code_under_bash() {
    let dir = scratch("v1-code-dir");
    let code = dir.join("code");
    std::fs::create_dir_all(&code).expect("code dir");
    std::fs::write(
        code.join("start.sh"),
        "#!/bin/sh\necho \"start.sh ran in $(basename \"$(pwd)\") with $1\"\n",
    )
    .expect("script");
    std::fs::set_permissions(
        code.join("start.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let spec = dir.join("job.json");
    std::fs::write(
        &spec,
        format!(
            r#"{{
  // As OpenPAI's examples wrote them: comments, and the code beside the job.
  "jobName": "v1-as-written",
  "image": "openpai/pai.example.tensorflow",
  "codeDir": "file://{}",
  "virtualCluster": "defualt",
  "gpuType": "K80",
  /* obsolete, but in many files */
  "killAllOnCompletedTaskNumber": 0,
  "taskRoles": [
    {{
      "name": "main-role",
      "taskNumber": "1",
      "command": "cd code && ./start.sh arg && echo {{1..3}} && arr=(x y) && [[ ${{arr[1]}} == y && -n $PAI_HOST_IP_main_role_0 ]] && echo bash-and-peers-ok && echo \"ip=$PAI_CURRENT_CONTAINER_IP host=$PAI_CONTAINER_HOST_IP role0=${{PAI_TASK_ROLE_0_HOST_LIST%%:*}} user=$PAI_USERNAME resource=$PAI_RESOURCE pod=${{PAI_CONTAINER_ID:+set}}\"",
      "minFailedTaskCount": null
    }}
  ]
}}"#,
            code.display()
        ),
    )
    .expect("spec");
    let (code, stdout, stderr) = run_spec(&spec, &["--user", "alice"], &[]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("[main-role-0] start.sh ran in code with arg"),
        "{stdout}"
    );
    assert!(stdout.contains("[main-role-0] 1 2 3"), "{stdout}");
    assert!(
        stdout.contains("[main-role-0] bash-and-peers-ok"),
        "{stdout}"
    );
    // OpenPAI v1's runtime's names, with its meanings.
    assert!(
        stdout.contains(
            "[main-role-0] ip=127.0.0.1 host=127.0.0.1 role0=127.0.0.1 user=alice resource=0,1,100,64 pod=set"
        ),
        "{stdout}"
    );
    for warned in [
        "warning: gpuType: \"K80\" is not used",
        "warning: virtualCluster: \"defualt\" (did you mean \"default\"?) names no queue",
        "warning: killAllOnCompletedTaskNumber: obsolete in OpenPAI",
        "warning: taskRoles[0].name: \"main-role\" is main_role in variable names",
    ] {
        assert!(stderr.contains(warned), "{warned}: {stderr}");
    }
    // The code was copied, not run where it lies: nothing was written beside it.
    assert_eq!(
        std::fs::read_dir(dir.join("code")).expect("code").count(),
        1
    );
}

#[test]
fn code_this_machine_cannot_reach_is_refused_before_anything_runs() {
    let dir = scratch("v1-code-missing");
    let spec = dir.join("job.json");
    std::fs::write(
        &spec,
        job(
            "no-code",
            json!([role("main", 1, "cd code && ./start.sh")]),
            json!({"codeDir": "hdfs://namenode:9000/user/alice/code"}),
        ),
    )
    .expect("spec");
    let (code, stdout, stderr) = run_spec(&spec, &[], &[("PATH", "/usr/bin:/bin")]);
    assert_eq!(code, Some(2), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("codeDir: hdfs://namenode:9000/user/alice/code is on HDFS, and this machine has no HDFS client"),
        "{stderr}"
    );
    assert!(!stdout.contains("[main-0]"), "{stdout}");
    assert!(
        !stderr.contains("running no-code on this machine"),
        "refused before it says it runs: {stderr}"
    );
    // Code on the default file system, which this machine's config does not name: the
    // refusal says which key of which file would.
    std::fs::write(
        &spec,
        job(
            "no-fs",
            json!([role("main", 1, "cd code && ./start.sh")]),
            json!({"codeDir": "$PAI_DEFAULT_FS_URI/alice/code"}),
        ),
    )
    .expect("spec");
    let (code, _, stderr) = run_spec(&spec, &[], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("set defaultFsUri in a config file given to `rest-lite serve --config FILE` or `rest-lite run --config FILE`")
            && !stderr.contains("running no-fs on this machine"),
        "{stderr}"
    );
}

/// `codeDir` on HDFS, where this machine has a client: the runtime fetches it with `hdfs
/// dfs -get` into the task's working directory (a stand-in client here records its
/// arguments and makes the directory, as Hadoop's would).
#[test]
fn code_on_hdfs_is_fetched_with_the_hdfs_client() {
    let dir = scratch("v1-code-hdfs");
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let calls = dir.join("hdfs-calls");
    std::fs::write(
        bin.join("hdfs"),
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\n[ \"$1 $2 $3\" = 'dfs -get -f' ] || exit 9\nmkdir -p \"$5/code\" && echo 'echo fetched from hdfs' > \"$5/code/start.sh\"\n",
            calls.display()
        ),
    )
    .expect("client");
    std::fs::set_permissions(
        bin.join("hdfs"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let spec = dir.join("job.json");
    std::fs::write(
        &spec,
        job(
            "hdfs-code",
            json!([role("main", 1, "cd code && sh start.sh")]),
            json!({"codeDir": "hdfs://namenode:9000/user/$PAI_USER_NAME/code"}),
        ),
    )
    .expect("spec");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let (code, stdout, stderr) = run_spec(&spec, &["--user", "alice"], &[("PATH", &path)]);
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("[main-0] fetched from hdfs"), "{stdout}");
    let calls = std::fs::read_to_string(&calls).expect("the client was called");
    assert!(
        calls.starts_with("dfs -get -f hdfs://namenode:9000/user/alice/code /"),
        "{calls}"
    );
}
