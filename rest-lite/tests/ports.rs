//! A task's ports on this machine: held by the server from their allocation until the
//! task's main container starts, and bound on the task's own address only.

use crate::common;

use pai_translate::spec::SpecFormat;
use serde_json::json;

use common::fifo::{final_view, until_none_left};
use common::jobs::{WAIT_FOR_TERM, job, log_of, role, submitted_and_up};
use common::serve::Server;

fn scratch(name: &str) -> common::Scratch {
    common::scratch("ports", name)
}

/// A task's ports stay bound by the server from their allocation until its main
/// container starts: while its init container runs (a `prep/` script here), nothing of
/// this machine can bind them; its user command then can.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_ports_are_held_until_its_main_container_starts() {
    let dir = scratch("held-ports");
    let (first, last) = (31600, 31639);
    // The only prep/ script: which ports of the range can be bound now.
    let assets = dir.join("assets");
    std::fs::create_dir_all(assets.join("prep")).expect("prep");
    std::fs::create_dir_all(assets.join("init")).expect("init");
    let during_init = dir.join("during-init");
    std::fs::write(
        assets.join("prep/10-ports.sh"),
        format!(
            "exec perl -MIO::Socket::INET -e 'for my $p ({first}..{last}) {{ \
             my $s = IO::Socket::INET->new(LocalAddr => \"0.0.0.0\", LocalPort => $p, \
             Listen => 1, ReuseAddr => 1); print \"$p \", ($s ? \"free\" : \"taken\"), \"\\n\" }}' > {}\n",
            during_init.display()
        ),
    )
    .expect("prep script");
    let server = Server::spawn(
        Server::command(&dir.join("state"))
            .args(["--backend", "local", "--port-range"])
            .arg(format!("{first}-{last}"))
            .arg("--assets")
            .arg(&assets),
        &["this machine (embedded default)"],
    )
    .with_machine_token(&dir.join("state"));
    let client = server.client();
    // The user command binds its own port.
    let bind = "perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => \"0.0.0.0\", \
                LocalPort => $ENV{PAI_CURRENT_CONTAINER_PORT}, Listen => 1, ReuseAddr => 1) \
                or die \"cannot bind: $!\\n\"; print \"bound $ENV{PAI_CURRENT_CONTAINER_PORT}\\n\"'";
    let spec = job("held", json!([role("worker", 1, bind)]), json!({}));
    client
        .submit("alice", &spec, SpecFormat::Json)
        .await
        .expect("submitted");
    let view = final_view(&client, "alice", "held").await;
    assert_eq!(view["jobStatus"]["state"], "SUCCEEDED", "{view:#}");
    let port = view["taskRoles"]["worker"]["taskStatuses"][0]["containerPorts"]["http"]
        .as_str()
        .expect("the task's http port")
        .to_string();
    let seen = std::fs::read_to_string(&during_init).expect("the prep script's report");
    assert!(
        seen.lines().any(|l| l == format!("{port} taken")),
        "port {port} was not held while the init container ran:\n{seen}"
    );
    let log = log_of(&client, "alice", "held", "worker", 0).await;
    assert_eq!(log, format!("bound {port}\n"));
    drop(server);
}

/// Listening sockets on `port` from /proc/net/tcp and tcp6, as `address:port` in hex.
fn listeners(port: u16) -> Vec<String> {
    let mut found = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
                continue;
            };
            if *state == "0A" && local.ends_with(&format!(":{port:04X}")) {
                found.push(local.to_string());
            }
        }
    }
    found
}

/// On this machine a task's ports are bound on its own address (127.0.0.1), never
/// wider: the ssh port the runtime serves (handed over from the server's hold, never
/// free in between) and every port while the server holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_task_port_is_bound_on_the_tasks_address_only() {
    let dir = scratch("bound");
    let server = Server::start(&dir.join("state"));
    let client = server.client();
    let roles = json!([role("worker", 2, WAIT_FOR_TERM)]);
    let (events, up) = submitted_and_up(&client, &dir, "bound", roles).await;
    assert_eq!(up, ["up worker-0", "up worker-1"]);
    let view = client.job("alice", "bound").await.expect("view");
    for task in &view.task_roles["worker"].task_statuses {
        let ports = &task.container_ports;
        let ssh: u16 = ports["ssh"].parse().expect("an ssh port");
        assert_eq!(
            listeners(ssh),
            [format!("0100007F:{ssh:04X}")],
            "the ssh port is served on 127.0.0.1 alone"
        );
        for (label, value) in ports.iter() {
            for port in value.split(',').filter_map(|p| p.parse::<u16>().ok()) {
                assert!(
                    listeners(port).iter().all(|l| l.starts_with("0100007F:")),
                    "{label} {port}: {:?}",
                    listeners(port)
                );
            }
        }
    }
    client.stop("alice", "bound").await.expect("stop");
    assert_eq!(until_none_left(&events).len(), 2);
    drop(server);
}
