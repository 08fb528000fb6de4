//! A job as the server's crates share it, beyond what its tasks read ([`pai_contract`]
//! holds that): the Kubernetes names of its objects, its tags, the jobs it waits for, how
//! its attempts ended and the back-off they earn, the GPUs its tasks hold on the embedded
//! default, and its ssh key pair. Each is kept on the Framework (a name, an annotation), so
//! that both backends and every server read the same. No I/O, as `kube-core` has none.

#![warn(missing_docs)]

pub mod attempts;
pub mod depends;
pub mod gpus;
pub mod names;
pub mod restarts;
pub mod ssh_key;
pub mod tags;
