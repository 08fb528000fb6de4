//! The ssh info: only tasks whose sshd answers. The Kubernetes backend over the in-process
//! API server, over real sockets.

use crate::support;

use support::*;

/// Only tasks whose sshd greets the server are listed; every other task is named with
/// its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_info_lists_only_tasks_whose_sshd_answers() {
    let s = start().await;
    submit_base_job(&s).await;
    let reply = request(s.addr, "GET", "/api/v1/user/alice/jobs/job/ssh", None, "").await;
    assert_eq!(reply.error(), (404, "NoJobSshInfoError".to_string()));
    assert!(
        reply.body.contains("ps-0: the task is waiting"),
        "{}",
        reply.body
    );

    // ps-0 answers as an SSH server does; ps-1's address has nothing on the port.
    s.api.modify("frameworks", NS, &fw(), |f| {
        pai_test_support::frameworks::set_pod_ip(f, "ps", 0, "127.0.0.1");
        pai_test_support::frameworks::set_pod_ip(f, "ps", 1, "127.0.0.2");
    });
    let view = until(s.addr, "/api/v1/user/alice/jobs/job", |r| {
        r.json()["taskRoles"]["ps"]["taskStatuses"][1]["containerIp"] == "127.0.0.2"
    })
    .await;
    let port: u16 = view.json()["taskRoles"]["ps"]["taskStatuses"][0]["containerPorts"]["ssh"]
        .as_str()
        .expect("ssh port")
        .parse()
        .expect("a port");
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the ssh port is free here");
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.write_all(b"SSH-2.0-test\r\n").await;
        }
    });
    let reply = request(s.addr, "GET", "/api/v1/user/alice/jobs/job/ssh", None, "").await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let info = reply.json();
    let containers = info["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1, "{info}");
    assert_eq!(containers[0]["id"], "ps-0");
    assert_eq!(containers[0]["sshIp"], "127.0.0.1");
    assert_eq!(containers[0]["sshPort"], port.to_string());
    assert_eq!(containers[0]["sshUser"], "root");
    assert_eq!(
        info["privateKeyUrl"], "/api/v1/user/alice/jobs/job/ssh/key",
        "{info}"
    );
    let reason = |id: &str| {
        info["unavailable"]
            .as_array()
            .expect("unavailable")
            .iter()
            .find(|u| u["id"] == id)
            .map(|u| u["reason"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert!(
        reason("ps-1").starts_with(&format!("nothing answers ssh at 127.0.0.2:{port}")),
        "{}",
        reason("ps-1")
    );
    assert!(
        reason("worker-0").contains("waiting"),
        "{}",
        reason("worker-0")
    );
}
