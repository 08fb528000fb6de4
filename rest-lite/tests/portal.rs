//! The portal in headless Chromium, driven with Playwright (`playwright-core` from npm,
//! pinned in `tests/portal/package-lock.json`, using the system's Chromium): a person
//! signs in, submits a spec through the form (an error first, shown beside its line),
//! sees the job run, clones and resubmits it, stops it, filters, searches and sorts the
//! list, deletes it; a page of another origin that posts to the form is refused.
//! `tests/portal/portal.js` does the clicking; this test starts the real server, checks
//! each step the script reports and the server's own state afterwards. Screenshots:
//! `target/portal/`. Needs Node.js, the npm package and Chromium (`.ci/run` installs
//! them); says what is missing and skips without them, except under `CI=true`.

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use common::serve::Server;
use pai_test_support::needs;

const TOKEN: &str = "portal-user-token";

/// The system's Chromium, where Node.js and Playwright's driver are there to drive it;
/// `None` (said, or a failure under `CI=true`) where something is missing.
fn browser() -> Option<PathBuf> {
    let chromium = needs::program("chromium");
    let ready = needs::present(
        "node",
        needs::program("node").is_some(),
        "apt-get install nodejs npm",
    ) && needs::present(
        "playwright-core from npm",
        portal_dir()
            .join("node_modules/playwright-core/package.json")
            .is_file(),
        "npm ci --prefix rest-lite/tests/portal",
    ) && needs::present("Chromium", chromium.is_some(), "apt-get install chromium");
    chromium.filter(|_| ready)
}

fn portal_dir() -> PathBuf {
    common::repo_root().join("rest-lite/tests/portal")
}

#[test]
fn a_person_submits_clones_stops_and_deletes_jobs_in_the_portal() {
    let Some(chromium) = browser() else { return };
    let dir = common::scratch("portal", "browser");
    let tokens = common::token_file(&dir, &[("alice", TOKEN, false)]);
    let server = Server::start_with_tokens(&dir.join("state"), &tokens);
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/portal");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let run = common::node::run(
        &portal_dir(),
        "portal.js",
        &[
            ("REST_LITE_URL", server.url.as_ref()),
            ("REST_LITE_TOKEN", TOKEN.as_ref()),
            ("CHROMIUM", chromium.as_os_str()),
            ("SHOTS", shots.as_os_str()),
        ],
    );
    let step = |name: &str| run.get(name);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();

    // Signing in: the form says where the token is, and leads back to the list.
    let form = step("sign-in-form");
    assert!(
        text(&form["url"]).contains("/ui/sign-in?next=/ui/jobs"),
        "{form}"
    );
    assert!(
        text(&form["hint"]).contains("Ask this server's operator"),
        "{form}"
    );
    assert!(
        !text(&form["hint"]).contains("tokens.yaml"),
        "never the file's path: {form}"
    );
    assert!(text(&step("signed-in")["url"]).ends_with("/ui/jobs"));

    // The error beside its line: `taskNumber: 0` is line 5 of the spec.
    let bad = &step("error-next-to-its-line")["bad"];
    assert_eq!(bad[0]["id"], "line-5", "{bad}");
    assert!(
        text(&bad[0]["text"]).contains("taskRoles[0].taskNumber"),
        "{bad}"
    );
    // A fresh form holds a job to start from, and links to every field's rule.
    let fresh = step("fresh-form");
    assert!(
        text(&fresh["text"]).contains("jobName: shell-hello"),
        "{fresh}"
    );
    assert_eq!(
        fresh["reference"], "/docs/reference#the-job-spec",
        "{fresh}"
    );
    assert!(text(&step("checked")["valid"]).contains("job portal-demo is valid: 2 tasks"));
    assert!(text(&step("submitted")["text"]).contains("portal-demo was submitted"));
    // Check says what Submit then says: the same warnings.
    let checked = &step("checked")["warnings"];
    assert!(
        checked.as_array().is_some_and(|w| !w.is_empty()),
        "this machine's warnings (its image is not used): {checked}"
    );
    assert_eq!(checked, &step("submitted")["warnings"]);

    // Running: its resources, its spec, links to its tasks' ports, what can be done.
    let running = step("running");
    assert_eq!(running["state"], "RUNNING");
    assert!(text(&running["resources"]).contains("worker"), "{running}");
    assert!(text(&running["resources"]).contains("256Mi"), "{running}");
    assert!(text(&running["spec"]).contains("jobName: portal-demo"));
    // Each task's ports as links, at its address; its ssh port is not a web page.
    let links = running["links"].as_array().expect("links");
    let http: Vec<&Value> = links
        .iter()
        .filter(|l| text(&l[0]).starts_with("http:"))
        .collect();
    assert_eq!(http.len(), 2, "an http port per task: {running}");
    for link in &http {
        let port = text(&link[0]).trim_start_matches("http:").to_string();
        assert_eq!(
            text(&link[1]),
            format!("http://127.0.0.1:{port}/"),
            "{running}"
        );
    }
    assert!(
        links.iter().all(|l| !text(&l[0]).starts_with("ssh:")),
        "{running}"
    );
    assert!(text(&running["commands"]).contains("logs portal-demo -r worker -i 0 -f"));
    assert_eq!(running["stop"], true);

    // The clone: the same spec under a new name, submitted.
    let cloned = step("cloned");
    assert_eq!(cloned["first_line"], "jobName: portal-demo-2");
    assert!(text(&cloned["text"]).contains("portal-demo-2 was submitted"));

    // A v2 spec uploaded as a file: read and checked as pasted text is.
    assert!(
        text(&step("uploaded")["valid"]).contains("job uploaded-v2 is valid: 1 task in 1 role"),
        "{}",
        step("uploaded")
    );

    // Stopped: no more stop button, nor commands for a running job.
    let stopped = step("stopped");
    assert_eq!(stopped["state"], "STOPPED");
    assert_eq!(stopped["stop"], false);
    assert_eq!(stopped["links"], 0, "no links to ports nobody serves");
    assert!(!text(&stopped["commands"]).contains(" -f"), "{stopped}");
    assert!(
        !text(&stopped["commands"]).contains("rest-lite ssh"),
        "{stopped}"
    );
    assert!(text(&stopped["commands"]).contains("rest-lite delete portal-demo"));

    // The list.
    assert_eq!(step("filtered")["jobs"], serde_json::json!(["portal-demo"]));
    assert!(text(&step("filtered")["url"]).contains("state=STOPPED"));
    assert_eq!(
        step("searched")["jobs"],
        serde_json::json!(["portal-demo-2"])
    );
    let sorted = step("sorted");
    assert_eq!(
        sorted["jobs"],
        serde_json::json!(["portal-demo", "portal-demo-2"])
    );
    assert!(
        sorted["durations"]
            .as_array()
            .is_some_and(|d| d.iter().all(|d| !text(d).is_empty())),
        "{sorted}"
    );
    assert!(text(&step("deleted")["url"]).ends_with("/ui/jobs"));
    assert_eq!(step("deleted")["asked"], true, "Delete asks once more");

    // Another origin: refused before anything ran.
    let other = step("other-origin");
    assert_eq!(other["status"], 403, "{other}");
    assert!(text(&other["body"]).contains("Origin"), "{other}");

    // The server agrees: the stopped job is gone, its clone runs, no job of the other
    // origin's page exists.
    let client = pai_client::Client::new(&server.url, Some(TOKEN.to_string()));
    let jobs = tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async { client.jobs(Some("alice")).await.expect("jobs") });
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["portal-demo-2"]);
    for shot in [
        "submit-with-an-error.png",
        "job-running.png",
        "jobs.png",
        "job-stopped.png",
    ] {
        assert!(shots.join(shot).is_file(), "{shot}");
    }
    drop(server);
}

/// No page is wider than a 1,280 px window (a wider one scrolls sideways and cuts its
/// text off): the list, a job whose cause is one long word, the submit form, the docs'
/// index with the API's routes, and each guide.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_fits_a_1280_px_window() {
    let Some(chromium) = browser() else { return };
    let dir = common::scratch("portal", "widths");
    let tokens = common::token_file(&dir, &[("alice", TOKEN, false)]);
    let server = Server::start_with_tokens(&dir.join("state"), &tokens);
    let client = pai_client::Client::new(&server.url, Some(TOKEN.to_string()));
    // A failure whose cause is one word of 400 characters, as a path or a URL can be.
    let word = "x".repeat(400);
    let spec = serde_json::json!({
        "jobName": "long-cause", "image": "busybox",
        "taskRoles": [{"name": "worker", "taskNumber": 1, "cpuNumber": 1, "memoryMB": 128,
            "command": format!("echo 'Error: /data/{word}' >&2; exit 1")}],
    })
    .to_string();
    client
        .submit("alice", &spec, pai_translate::spec::SpecFormat::Json)
        .await
        .expect("submitted");
    let view = common::fifo::final_view(&client, "alice", "long-cause").await;
    assert!(
        view["jobStatus"]["appExitDiagnostics"]
            .as_str()
            .is_some_and(|d| d.contains(&word)),
        "{view}"
    );
    let mut pages = vec![
        "/ui/jobs".to_string(),
        "/ui/jobs/alice/long-cause".to_string(),
        "/ui/submit".to_string(),
        "/docs".to_string(),
    ];
    pages.extend(["using", "reference", "operating", "internals"].map(|g| format!("/docs/{g}")));
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/portal");
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let pages_json = serde_json::to_string(&pages).expect("json");
    let run = common::node::run(
        &portal_dir(),
        "widths.js",
        &[
            ("REST_LITE_URL", server.url.as_ref()),
            ("REST_LITE_TOKEN", TOKEN.as_ref()),
            ("CHROMIUM", chromium.as_os_str()),
            ("SHOTS", shots.as_os_str()),
            ("PAGES", pages_json.as_ref()),
        ],
    );
    // The docs as Chromium shows them: the header with the user and the way out on each
    // of them, and every route's description a sentence (the route cut off before it).
    let docs: Vec<&Value> = run.steps.iter().filter(|s| s["step"] == "docs").collect();
    assert_eq!(docs.len(), 5, "{}", run.stdout);
    for page in &docs {
        assert_eq!(page["signOut"], true, "{page}");
        assert!(
            page["user"].as_str().is_some_and(|u| u.contains("alice")),
            "{page}"
        );
    }
    let routes = docs[0]["routes"].as_array().expect("routes");
    assert!(routes.len() > 20, "{}", docs[0]);
    for route in routes {
        let text = route.as_str().unwrap_or_default();
        let first = text.chars().next().unwrap_or(' ');
        assert!(
            first.is_uppercase() || first == '{' || text.starts_with('`'),
            "not a sentence: {text:?}"
        );
        assert!(text.ends_with('.') || text.ends_with(')'), "{text:?}");
    }
    let widths: Vec<&Value> = run.steps.iter().filter(|s| s["step"] == "width").collect();
    assert_eq!(widths.len(), pages.len(), "{}", run.stdout);
    for width in widths {
        assert_eq!(width["status"], 200, "{width}");
        assert!(
            width["page"].as_u64() <= width["window"].as_u64(),
            "wider than the window: {width}"
        );
    }
}
