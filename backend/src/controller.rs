//! The one controller runtime: every controller of the server (the dependency
//! controller on both backends; on a cluster the peer-table publisher, the attempt
//! historian and the event recorder) is a [`Reconcile`] run by [`run`], as kube-rs's
//! `Controller` runs a `reconcile` function.
//!
//! Level-triggered: a controller is handed every change of the jobs it follows, in
//! order, and every job at the start and again after it missed changes; what it could not
//! do is handed back later, as it is by then, with the one back-off
//! ([`pai_contract::backoff::SERVER`]: 0.5 s doubling to 30 s, jittered). A change of a job
//! that waits for a retry replaces what was waiting: the newest state is what is looked
//! at. The back-off starts again once a round of retries leaves nothing behind.

use std::collections::HashMap;
use std::future::Future;

use futures::{Stream, StreamExt};
use pai_contract::backoff::{self, Backoff};

/// What a source of changes says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event<C> {
    /// Something changed.
    Changed(C),
    /// Changes were missed (the subscriber fell behind): look at everything again.
    Missed,
}

/// What a controller did with one change.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<C> {
    /// Done: nothing to do again until the next change.
    Done,
    /// Not done (the API server failed, a write raced): look at `C` again after the
    /// back-off, unless a newer change of the same key comes first.
    Retry(C),
}

/// A controller: what it does with one change, and what everything is.
pub trait Reconcile: Send {
    /// What a change carries: a job as it is now, or a job's name.
    type Change: Send;

    /// The job a change is about (a retry waits under it).
    fn key(change: &Self::Change) -> String;

    /// Every job as a change: at the start, and after changes were missed.
    fn all(&mut self) -> impl Future<Output = Vec<Self::Change>> + Send;

    /// Brings what the controller keeps in line with `change`.
    fn reconcile(
        &mut self,
        change: Self::Change,
    ) -> impl Future<Output = Outcome<Self::Change>> + Send;
}

/// Runs `controller` over `changes` until the stream ends.
pub async fn run<R, S>(mut controller: R, changes: S)
where
    R: Reconcile,
    S: Stream<Item = Event<R::Change>> + Send,
{
    let mut loop_ = Runtime {
        pending: HashMap::new(),
        backoff: Backoff::new(backoff::SERVER),
    };
    futures::pin_mut!(changes);
    loop_.everything(&mut controller).await;
    let retry = tokio::time::sleep(std::time::Duration::ZERO);
    futures::pin_mut!(retry);
    let mut armed = false;
    loop {
        tokio::select! {
            event = changes.next() => match event {
                None => return,
                Some(Event::Changed(change)) => {
                    loop_.pending.remove(&R::key(&change));
                    loop_.one(&mut controller, change).await;
                }
                Some(Event::Missed) => {
                    tracing::debug!("a controller fell behind the changes; looking at every job");
                    loop_.everything(&mut controller).await;
                }
            },
            () = &mut retry, if armed => {
                armed = false;
                let pending = std::mem::take(&mut loop_.pending);
                for change in pending.into_values() {
                    loop_.one(&mut controller, change).await;
                }
                if loop_.pending.is_empty() {
                    loop_.backoff.reset();
                }
            }
        }
        if !armed && !loop_.pending.is_empty() {
            let delay = loop_.backoff.next_delay();
            retry.as_mut().reset(tokio::time::Instant::now() + delay);
            armed = true;
        }
    }
}

/// The changes of a broadcast as the runtime takes them, each made a change by `into`;
/// a receiver that fell behind is told to look at everything.
pub fn from_broadcast<T, C>(
    changes: tokio::sync::broadcast::Receiver<T>,
    into: fn(T) -> C,
) -> futures::stream::BoxStream<'static, Event<C>>
where
    T: Clone + Send + 'static,
    C: Send + 'static,
{
    use tokio::sync::broadcast::error::RecvError;
    futures::stream::unfold(changes, move |mut changes| async move {
        let event = match changes.recv().await {
            Ok(change) => Event::Changed(into(change)),
            Err(RecvError::Lagged(_)) => Event::Missed,
            Err(RecvError::Closed) => return None,
        };
        Some((event, changes))
    })
    .boxed()
}

struct Runtime<C> {
    /// What waits for a retry, by key.
    pending: HashMap<String, C>,
    backoff: Backoff,
}

impl<C: Send> Runtime<C> {
    async fn one<R: Reconcile<Change = C>>(&mut self, controller: &mut R, change: C) {
        if let Outcome::Retry(again) = controller.reconcile(change).await {
            self.pending.insert(R::key(&again), again);
        }
    }

    async fn everything<R: Reconcile<Change = C>>(&mut self, controller: &mut R) {
        self.pending.clear();
        for change in controller.all().await {
            self.one(controller, change).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records what it is handed; fails `fail_times` times for key "flaky".
    struct Recording {
        seen: Arc<Mutex<Vec<String>>>,
        everything: Vec<String>,
        fail_times: u32,
        done: Option<tokio::sync::oneshot::Sender<()>>,
    }

    impl Reconcile for Recording {
        type Change = String;

        fn key(change: &String) -> String {
            change.split('@').next().unwrap_or_default().to_string()
        }

        async fn all(&mut self) -> Vec<String> {
            self.seen.lock().unwrap().push("(all)".into());
            self.everything.clone()
        }

        async fn reconcile(&mut self, change: String) -> Outcome<String> {
            self.seen.lock().unwrap().push(change.clone());
            if change.starts_with("flaky") && self.fail_times > 0 {
                self.fail_times -= 1;
                return Outcome::Retry(change);
            }
            if change == "last"
                && let Some(done) = self.done.take()
            {
                let _ = done.send(());
            }
            Outcome::Done
        }
    }

    #[tokio::test(start_paused = true)]
    async fn everything_first_then_changes_in_order_then_everything_after_a_miss() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let controller = Recording {
            seen: seen.clone(),
            everything: vec!["a".into(), "b".into()],
            fail_times: 0,
            done: None,
        };
        let changes = futures::stream::iter([
            Event::Changed("b".to_string()),
            Event::Missed,
            Event::Changed("c".to_string()),
        ]);
        run(controller, changes).await;
        assert_eq!(
            *seen.lock().unwrap(),
            ["(all)", "a", "b", "b", "(all)", "a", "b", "c"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_is_retried_after_the_back_off_as_its_newest_change() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (done, finished) = tokio::sync::oneshot::channel();
        let controller = Recording {
            seen: seen.clone(),
            everything: Vec::new(),
            fail_times: 2,
            done: Some(done),
        };
        let (send, receive) = tokio::sync::mpsc::unbounded_channel();
        let changes = futures::stream::unfold(receive, |mut r| async move {
            r.recv().await.map(|item| (item, r))
        });
        let task = tokio::spawn(run(controller, changes));
        send.send(Event::Changed("flaky@1".to_string())).unwrap();
        // A newer change of the same job comes before the retry: it replaces it.
        send.send(Event::Changed("flaky@2".to_string())).unwrap();
        // With the clock paused, the runtime's back-off timer fires once the runtime
        // is idle: the retry of flaky@2 succeeds on its second try.
        tokio::time::sleep(std::time::Duration::from_secs(120)).await;
        send.send(Event::Changed("last".to_string())).unwrap();
        finished.await.unwrap();
        drop(send);
        task.await.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            ["(all)", "flaky@1", "flaky@2", "flaky@2", "last"]
        );
    }
}
