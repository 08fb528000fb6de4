//! What the local tests share: the FIFO tasks report through (every user process holds
//! its write end, so end of file means every one of them is gone, with no sleeping or
//! polling), and the job's view at its end.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;

use futures::StreamExt;
use pai_client::Client;
use serde_json::Value;

use super::serve::DEADLINE;

/// A FIFO `dir/events` the tasks write lines into; its lines arrive on the receiver,
/// then `None` at end of file (no writer left).
pub fn events(dir: &Path) -> (PathBuf, mpsc::Receiver<Option<String>>) {
    let path = dir.join("events");
    let status = Command::new("mkfifo").arg(&path).status().expect("mkfifo");
    assert!(status.success());
    let (tx, rx) = mpsc::channel();
    let reader = path.clone();
    std::thread::spawn(move || {
        // Opening blocks until the first writer.
        let Ok(file) = std::fs::File::open(&reader) else {
            return;
        };
        for line in BufReader::new(file).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(Some(line));
        }
        let _ = tx.send(None);
    });
    (path, rx)
}

/// The next line, or `None` once no task process holds the FIFO.
pub fn next_event(rx: &mpsc::Receiver<Option<String>>) -> Option<String> {
    rx.recv_timeout(DEADLINE).expect("an event from the tasks")
}

/// The job's view once it reaches a final state.
pub async fn final_view(client: &Client, user: &str, job: &str) -> Value {
    let mut changes = client.watch(user, job).await.expect("watch");
    let mut last = None;
    let follow = async {
        while let Some(view) = changes.next().await {
            last = Some(view.expect("a view"));
        }
    };
    tokio::time::timeout(DEADLINE, follow)
        .await
        .expect("the job completes");
    serde_json::to_value(last.expect("at least one view")).expect("JSON")
}

/// Every event until end of file (no task process holds the FIFO any more), sorted.
pub fn until_none_left(rx: &mpsc::Receiver<Option<String>>) -> Vec<String> {
    let mut seen = Vec::new();
    while let Some(event) = next_event(rx) {
        seen.push(event);
    }
    seen.sort();
    seen
}
