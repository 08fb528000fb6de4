//! The pages for people, on the real `rest-lite serve --backend local` with real tasks:
//! in headless Chromium (what a person sees: the job, its state, its tasks, a log line,
//! while the job runs and after it ended, with screenshots in `target/pages/`), and over
//! plain HTTP for the sign-in, the per-user rule and the headers.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::{events, final_view, next_event};
use common::request;
use common::serve::Server;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("pages", name)
}

/// Each task prints a line with markup in it, reports `up` (holding the events FIFO open
/// until it ends), then waits for its exit code on its own FIFO `go-<role>-<index>`.
const TASK: &str = r#"me="$PAI_CURRENT_TASK_ROLE_NAME-$PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX"
echo "hello from $me <b>not bold</b>"
exec 3>"$EVENTS"
echo "up $me" >&3
read -r code < "$GO_DIR/go-$me"
echo "bye from $me"
exit "$code""#;

/// A job `name` of a 2-task `worker` role and a 1-task `ps` role running [`TASK`], and
/// the FIFOs that end its tasks.
fn job(dir: &Path, name: &str, events: &Path) -> (String, Vec<PathBuf>) {
    let mut go = Vec::new();
    for id in ["worker-0", "worker-1", "ps-0"] {
        let fifo = dir.join(format!("go-{id}"));
        assert!(
            Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .expect("mkfifo")
                .success()
        );
        go.push(fifo);
    }
    let role = |name: &str, tasks: u32| json!({"name": name, "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 128, "command": TASK});
    let spec = json!({
        "jobName": name, "image": "debian",
        "taskRoles": [role("worker", 2), role("ps", 1)],
        "jobEnvs": {"EVENTS": events.display().to_string(), "GO_DIR": dir.display().to_string()},
    });
    (spec.to_string(), go)
}

fn release(go: &[PathBuf], code: u8) {
    for fifo in go {
        std::fs::write(fifo, format!("{code}\n")).expect("the task reads its FIFO");
    }
}

/// Headless Chromium: the DOM of `url` after it loaded, and a screenshot of it.
fn browse(chromium: &Path, url: &str, screenshot: &Path, profile: &Path) -> String {
    let common = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--window-size=1280,1100",
        "--hide-scrollbars",
    ];
    let shot = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args(common)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(url)
        .output()
        .expect("chromium");
    assert!(
        shot.status.success() && screenshot.is_file(),
        "chromium --screenshot: {}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let dom = Command::new("timeout")
        .arg("120")
        .arg(chromium)
        .args(common)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium");
    assert!(
        dom.status.success(),
        "chromium --dump-dom: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    String::from_utf8_lossy(&dom.stdout).into_owned()
}

fn screenshots() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/pages");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_sees_the_job_its_tasks_and_their_logs_in_chromium() {
    let found = pai_test_support::needs::program("chromium");
    if !pai_test_support::needs::present("Chromium", found.is_some(), "apt-get install chromium") {
        return;
    }
    let chromium = found.expect("present");
    let dir = scratch("chromium");
    let profile = dir.join("profile");
    let (events_path, events) = events(&dir);
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let (spec, go) = job(&dir, "pages", &events_path);
    client
        .submit("alice", &spec, SpecFormat::Json)
        .await
        .expect("submitted");
    let mut up: Vec<String> = (0..3)
        .map(|_| next_event(&events).expect("a task is up"))
        .collect();
    up.sort();
    assert_eq!(up, ["up ps-0", "up worker-0", "up worker-1"]);

    let shots = screenshots();
    // Through the sign-in link `serve` prints: the token goes into the cookie, and the
    // browser lands on the page without it in the address.
    let token = server.token.clone().expect("the machine's token");
    let signed = |path: &str| format!("{}/ui/sign-in?token={token}&next={path}", server.url);
    let list = browse(
        &chromium,
        &signed("/ui/jobs"),
        &shots.join("jobs-running.png"),
        &profile,
    );
    assert!(
        list.contains(r#"<a href="/ui/jobs/alice/pages">pages</a>"#),
        "{list}"
    );
    assert!(
        list.contains(r#"<span class="state RUNNING">RUNNING</span>"#),
        "{list}"
    );
    assert!(list.contains("3 / 3"), "tasks running / total: {list}");

    let url = signed("/ui/jobs/alice/pages");
    let running = browse(&chromium, &url, &shots.join("job-running.png"), &profile);
    assert!(running.contains(r#"id="job-state">RUNNING<"#), "{running}");
    assert!(
        running.contains(r#"http-equiv="refresh""#),
        "refreshes while running"
    );
    for id in ["worker-0", "worker-1", "ps-0"] {
        assert!(
            running.contains(&format!(r#"id="task-{id}""#)),
            "{id}: {running}"
        );
        // The task's output as text: its markup escaped, never an element.
        assert!(
            running.contains(&format!("hello from {id} &lt;b&gt;not bold&lt;/b&gt;")),
            "{id}'s log line: {running}"
        );
    }
    assert!(
        running.contains("rest-lite ssh pages worker 0"),
        "{running}"
    );

    release(&go, 0);
    let view = final_view(&client, "alice", "pages").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    let ended = browse(&chromium, &url, &shots.join("job-succeeded.png"), &profile);
    assert!(ended.contains(r#"id="job-state">SUCCEEDED<"#), "{ended}");
    assert!(
        !ended.contains(r#"http-equiv="refresh""#),
        "no refresh once final"
    );
    assert!(ended.contains("bye from worker-1"), "{ended}");
    assert!(ended.contains("Exit code"), "{ended}");
    // The task whose end decided a success is marked as a success, not a failure.
    if view["jobStatus"]["appExitTriggerTaskRoleName"].is_string() {
        assert!(
            ended.contains(r#"class="decided SUCCEEDED""#)
                && !ended.contains(r#"class="decided FAILED""#),
            "{ended}"
        );
    }
    // An ended job offers what can still be done: no following, no ssh, no stop.
    let commands = ended
        .split(r#"<pre id="commands">"#)
        .nth(1)
        .and_then(|rest| rest.split("</pre>").next())
        .expect("the commands");
    assert!(
        !commands.contains(" -f")
            && !commands.contains("rest-lite ssh")
            && !commands.contains("rest-lite stop"),
        "{commands}"
    );
    assert!(!ended.contains(r#"id="stop""#), "no Stop button: {ended}");
    assert!(!ended.contains("no output yet"), "{ended}");
    assert!(
        ended.contains("Completed"),
        "the conditions' timeline: {ended}"
    );
    let list = browse(
        &chromium,
        &signed("/ui/jobs"),
        &shots.join("jobs-succeeded.png"),
        &profile,
    );
    assert!(
        list.contains(r#"<span class="state SUCCEEDED">SUCCEEDED</span>"#),
        "{list}"
    );
    drop(server);
}

/// A failed two-role job as a person sees it: the task whose end decided the outcome
/// marked, the tasks the platform ended explained, the user's output in the previews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_page_marks_the_culprit_and_explains_the_rest_in_chromium() {
    let found = pai_test_support::needs::program("chromium");
    if !pai_test_support::needs::present("Chromium", found.is_some(), "apt-get install chromium") {
        return;
    }
    let chromium = found.expect("present");
    let dir = scratch("chromium-failed");
    let profile = dir.join("profile");
    let (events_path, events) = events(&dir);
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let (spec, go) = job(&dir, "broken", &events_path);
    // One failed worker fails the job.
    let mut spec: serde_json::Value = serde_json::from_str(&spec).expect("JSON");
    spec["taskRoles"][0]["minFailedTaskCount"] = json!(1);
    client
        .submit("alice", &spec.to_string(), SpecFormat::Json)
        .await
        .expect("submitted");
    for _ in 0..3 {
        next_event(&events).expect("a task is up");
    }
    // worker-1 exits 3; the platform ends the others.
    let worker_1 = go
        .iter()
        .find(|f| f.ends_with("go-worker-1"))
        .expect("fifo");
    release(std::slice::from_ref(worker_1), 3);
    let view = final_view(&client, "alice", "broken").await;
    assert_eq!(view["jobStatus"]["state"], "FAILED", "{view:#}");

    let token = server.token.clone().expect("the machine's token");
    let url = format!(
        "{}/ui/sign-in?token={token}&next=/ui/jobs/alice/broken",
        server.url
    );
    let page = browse(
        &chromium,
        &url,
        &screenshots().join("job-failed.png"),
        &profile,
    );
    assert!(page.contains(r#"id="job-state">FAILED<"#), "{page}");
    assert!(
        page.contains(r#"<tr id="task-worker-1" class="decided FAILED">"#)
            && page.contains("its end decided the job's outcome"),
        "the culprit is marked: {page}"
    );
    for id in ["worker-0", "ps-0"] {
        let row = page
            .split(&format!(r#"<tr id="task-{id}">"#))
            .nth(1)
            .and_then(|rest| rest.split("</tr>").next())
            .unwrap_or_else(|| panic!("{id}'s row: {page}"));
        assert!(
            row.contains("<code>-220</code>") && row.contains("stopped by the platform"),
            "{id} is explained: {row}"
        );
        assert!(
            row.contains(r#"<span class="state STOPPED">STOPPED</span>"#),
            "{id} was ended by the platform, not failed: {row}"
        );
    }
    assert!(
        page.contains("bye from worker-1"),
        "the user's output: {page}"
    );
    // The previews are the user's output; the runtime's lines are folded apart.
    let previews: Vec<&str> = page
        .split(r#"<pre class="tail">"#)
        .skip(1)
        .filter_map(|p| p.split("</pre>").next())
        .collect();
    assert!(
        previews
            .iter()
            .any(|p| p.contains("bye from worker-1") && !p.contains("[runtime ")),
        "{previews:?}"
    );
    assert!(
        page.contains("<summary>the runtime's last lines</summary>")
            && previews
                .iter()
                .any(|p| p.contains("[runtime INFO] ") && !p.contains("bye from")),
        "{page}"
    );
    assert!(
        page.contains("TaskFailed")
            && page.contains("task worker-1 ended with exit code 3: (the reason above)"),
        "the Failed condition names the task, and the reason once: {page}"
    );
    // The reason, said once (the cause the runtime picked from its output), besides the
    // task's own output and the runtime's folded line that picked it.
    let outside_runtime_lines: String = page
        .lines()
        .filter(|l| !l.starts_with("[runtime "))
        .collect();
    assert_eq!(
        outside_runtime_lines.matches("bye from worker-1").count(),
        2,
        "{page}"
    );
    drop(server);
}

const ALICE: &str = "alice's token; with a space";
const BOB: &str = "bob-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_sign_in_with_a_cookie_and_show_each_user_only_their_jobs() {
    use pai_server::auth::hash;
    let dir = scratch("sign-in");
    let tokens = dir.join("tokens.yaml");
    std::fs::write(
        &tokens,
        format!(
            "users:\n  - {{name: alice, tokenSha256: {}}}\n  - {{name: bob, tokenSha256: {}}}\n",
            hash(ALICE),
            hash(BOB)
        ),
    )
    .expect("tokens");
    let (events_path, events) = events(&dir);
    let server = Server::start_with_tokens(&dir.join("state"), &tokens);
    let url = server.url.clone();
    let alice = pai_client::Client::new(&url, Some(ALICE.to_string()));
    let (spec, go) = job(&dir, "mine", &events_path);
    alice
        .submit("alice", &spec, SpecFormat::Json)
        .await
        .expect("submitted");
    for _ in 0..3 {
        next_event(&events).expect("a task is up");
    }

    // Whom a token stands for: its holder alone, and nobody without one.
    let nobody = request(&url, "GET", "/api/v1/whoami", &[], "");
    assert_eq!(nobody.status, 401, "{}", nobody.body);
    let bearer = format!("Bearer {BOB}");
    let bob = request(
        &url,
        "GET",
        "/api/v1/whoami",
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(bob.status, 200, "{}", bob.body);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&bob.body).expect("JSON"),
        json!({"user": "bob", "admin": false})
    );

    // No token: to the sign-in, coming back here afterwards.
    let anonymous = request(&url, "GET", "/ui/jobs/alice/mine", &[], "");
    assert_eq!(anonymous.status, 303);
    assert_eq!(
        anonymous.header("location"),
        Some("/ui/sign-in?next=/ui/jobs/alice/mine")
    );
    let form = request(&url, "GET", "/ui/sign-in?next=/ui/jobs/alice/mine", &[], "");
    assert_eq!(form.status, 200);
    assert!(form.body.contains(r#"name="token""#), "{}", form.body);

    // A wrong token: 401, the form again with what went wrong, no cookie.
    let form_type = ("Content-Type", "application/x-www-form-urlencoded");
    let wrong = request(
        &url,
        "POST",
        "/ui/sign-in",
        &[form_type],
        "token=nope&next=%2Fui%2Fjobs",
    );
    assert_eq!(wrong.status, 401);
    assert!(
        wrong.body.contains("not known to this server"),
        "{}",
        wrong.body
    );
    assert_eq!(wrong.header("set-cookie"), None);

    // Alice's token: a cookie scripts cannot read and other sites do not send, then
    // back to her job; never to another site.
    let encoded = "alice%27s+token%3B+with+a+space";
    let signed = request(
        &url,
        "POST",
        "/ui/sign-in",
        &[form_type],
        &format!("token={encoded}&next=%2Fui%2Fjobs%2Falice%2Fmine"),
    );
    assert_eq!(signed.status, 303, "{}", signed.body);
    assert_eq!(signed.header("location"), Some("/ui/jobs/alice/mine"));
    let cookie = signed.header("set-cookie").expect("a cookie").to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let offsite = request(
        &url,
        "POST",
        "/ui/sign-in",
        &[form_type],
        &format!("token={encoded}&next=https%3A%2F%2Fevil.example%2F"),
    );
    assert_eq!(offsite.header("location"), Some("/ui/jobs"));
    let cookie = cookie.split(';').next().expect("pair").to_string();

    let page = request(
        &url,
        "GET",
        "/ui/jobs/alice/mine",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(r#"id="job-state">RUNNING<"#),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("hello from worker-0 &lt;b&gt;not bold&lt;/b&gt;")
    );
    assert!(
        !page.body.contains("<b>not bold</b>"),
        "task output is escaped"
    );
    // Its commands work as printed from another terminal: this server, named (alice's
    // own job: her token's user is the command line's default).
    let host = url.trim_start_matches("http://");
    assert!(
        page.body
            .contains(&format!("rest-lite status mine --server http://{host}\n")),
        "{}",
        page.body
    );
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert!(
        page.header("content-security-policy")
            .is_some_and(|p| p.contains("default-src 'none'")),
        "{:?}",
        page.headers
    );
    let list = request(&url, "GET", "/ui/jobs", &[("Cookie", &cookie)], "");
    assert!(list.body.contains(">mine</a>"), "{}", list.body);

    // A task's whole log is plain text, never HTML.
    let log = request(
        &url,
        "GET",
        "/ui/jobs/alice/mine/logs/worker/1",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(log.status, 200);
    assert_eq!(
        log.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(log.header("x-content-type-options"), Some("nosniff"));
    assert!(
        log.body.contains("hello from worker-1 <b>not bold</b>"),
        "{}",
        log.body
    );
    // The output is the user's; the runtime's lines are one link away.
    assert!(!log.body.contains("[runtime "), "{}", log.body);
    let runtime = request(
        &url,
        "GET",
        "/ui/jobs/alice/mine/logs/worker/1?source=runtime",
        &[("Cookie", &cookie)],
        "",
    );
    assert!(
        runtime.body.contains("[runtime INFO] ") && runtime.body.contains("barrier passed"),
        "{}",
        runtime.body
    );
    assert!(!runtime.body.contains("hello from"), "{}", runtime.body);
    // A page for people: a `source` it does not know shows the output.
    let unknown = request(
        &url,
        "GET",
        "/ui/jobs/alice/mine/logs/worker/1?source=bogus",
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(unknown.status, 200);
    assert!(
        unknown.body.contains("hello from worker-1") && !unknown.body.contains("[runtime "),
        "{}",
        unknown.body
    );

    // Bob sees neither Alice's job in his list nor her job's page or logs.
    let bearer = format!("Bearer {BOB}");
    let bob_list = request(&url, "GET", "/ui/jobs", &[("Authorization", &bearer)], "");
    assert_eq!(bob_list.status, 200);
    assert!(!bob_list.body.contains("mine"), "{}", bob_list.body);
    for path in ["/ui/jobs/alice/mine", "/ui/jobs/alice/mine/logs/worker/0"] {
        let bob = request(&url, "GET", path, &[("Authorization", &bearer)], "");
        assert_eq!(bob.status, 404, "{path}");
        assert!(!bob.body.contains("hello from"), "{path}: {}", bob.body);
    }
    // Nor can he stop, delete or clone it from the portal (as from his own page: the
    // browser's Sec-Fetch-Site says so).
    for action in ["stop", "delete"] {
        let bob = request(
            &url,
            "POST",
            &format!("/ui/jobs/alice/mine/{action}"),
            &[
                ("Authorization", &bearer),
                ("Sec-Fetch-Site", "same-origin"),
            ],
            "",
        );
        assert_eq!(bob.status, 404, "{action}: {}", bob.body);
    }
    let clone = request(
        &url,
        "GET",
        "/ui/submit?clone=alice/mine",
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(clone.status, 200);
    assert!(
        clone.body.contains("alice~mine was not found") && !clone.body.contains("jobName"),
        "{}",
        clone.body
    );
    let still = alice.job("alice", "mine").await.expect("still there");
    assert_eq!(still.job_status.state, pai_api::status::JobState::Running);

    // Signing out clears the cookie.
    let out = request(&url, "POST", "/ui/sign-out", &[("Cookie", &cookie)], "");
    assert_eq!(out.status, 303);
    assert!(
        out.header("set-cookie")
            .is_some_and(|c| c.contains("Max-Age=0"))
    );

    release(&go, 0);
    final_view(&alice, "alice", "mine").await;
    drop(server);
}

#[test]
fn the_root_leads_to_the_jobs_and_the_docs_list_the_api() {
    let dir = scratch("docs");
    let server = Server::start(&dir.join("state"));
    let root = request(&server.url, "GET", "/", &[], "");
    assert_eq!(root.status, 303);
    assert_eq!(root.header("location"), Some("/ui/jobs"));
    // Without the token, the pages ask to sign in; with it (the cookie), they show.
    let anonymous = request(&server.url, "GET", "/ui/jobs", &[], "");
    assert_eq!(anonymous.status, 303);
    assert_eq!(
        anonymous.header("location"),
        Some("/ui/sign-in?next=/ui/jobs")
    );
    let cookie = format!(
        "rest_lite_token={}",
        server.token.as_deref().expect("token")
    );
    let signed_in = [("Cookie", cookie.as_str())];
    let empty = request(&server.url, "GET", "/ui/jobs", &signed_in, "");
    assert_eq!(empty.status, 200);
    assert!(empty.body.contains("No jobs yet"), "{}", empty.body);
    let docs = request(&server.url, "GET", "/docs", &[], "");
    assert_eq!(docs.status, 200);
    for route in [
        "/api/v1/user/{user}/jobs",
        "/api/v1/user/{user}/jobs/{job}/logs",
        "/api/v1/openapi.json",
    ] {
        assert!(docs.body.contains(route), "{route}: {}", docs.body);
    }
    // Each route's description reads as a sentence, the route cut off before it.
    for fragment in [
        "<p>the job's name comes from the spec.",
        "<p>or its changes with",
        "<p>the Framework and, with it, its pods.",
    ] {
        assert!(!docs.body.contains(fragment), "{fragment}: {}", docs.body);
    }
    assert!(
        docs.body
            .contains("<p>Submits a job; its name comes from the spec."),
        "{}",
        docs.body
    );
    assert!(!docs.body.contains("Sign out"), "nobody signed in");
    // Signed in, the header says who, with the way out, as on every other page.
    let docs = request(&server.url, "GET", "/docs", &signed_in, "");
    assert!(docs.body.contains("Sign out"), "{}", docs.body);
    let guide = request(&server.url, "GET", "/docs/using", &signed_in, "");
    assert!(guide.body.contains("Sign out"), "{}", guide.body);
    let missing = request(&server.url, "GET", "/ui/jobs/alice/nothing", &signed_in, "");
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("alice~nothing"), "{}", missing.body);
    drop(server);
}
