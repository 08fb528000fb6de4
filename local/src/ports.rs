//! Ports for tasks sharing one host: every task gets its own, each one free here when
//! handed out. They come from a configured range below the one the kernel gives
//! outgoing connections (so no client connection of this machine takes a port a task
//! was told to bind), in turn from where the last job's ended (so a port just given up
//! is the last to be given again), starting at a random place (so another server of
//! this machine does not follow the same order). Each port stays bound by the server
//! from its allocation until its task's main container starts ([`HeldPorts`]), so
//! nothing of this machine takes it meanwhile (the barrier, the init container), and no
//! two tasks get the same one.

use std::collections::HashMap;
use std::net::{Ipv4Addr, TcpListener};
use std::ops::RangeInclusive;
use std::sync::Mutex;

use pai_contract::{Framework, PortPlan, TaskPorts};

/// The range ports are drawn from, the address they are bound on, and where the next
/// search starts.
pub struct Ports {
    range: RangeInclusive<u16>,
    address: Ipv4Addr,
    next: Mutex<u16>,
}

impl Ports {
    /// Ports of `range` on `address` (the tasks' own, never wider), from a random place
    /// in the range: two servers of this machine (two users' embedded defaults) do not
    /// hand out the same ports in the same order.
    pub fn new(range: RangeInclusive<u16>, address: Ipv4Addr) -> Self {
        let mut bytes = [0u8; 2];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
        let size = u32::from(*range.end() - *range.start()) + 1;
        let offset = u32::from(u16::from_le_bytes(bytes)) % size;
        let next = Mutex::new(*range.start() + offset as u16);
        Self {
            range,
            address,
            next,
        }
    }

    /// Holds `ports` again, as given before (a restarted server's task that starts
    /// again with the ports its peers were told): an error names the first one that is
    /// taken now.
    pub fn hold(&self, ports: impl IntoIterator<Item = u16>) -> std::io::Result<HeldPorts> {
        let mut bound = Vec::new();
        for port in ports {
            let listener = TcpListener::bind((self.address, port)).map_err(|e| {
                std::io::Error::new(e.kind(), format!("port {port} is taken now: {e}"))
            })?;
            bound.push((port, listener));
        }
        Ok(HeldPorts(std::sync::Arc::new(Mutex::new(bound))))
    }

    /// The next free port of the range, held by the listener returned with it.
    fn take(&self, next: &mut u16, tried: &mut usize) -> std::io::Result<(u16, TcpListener)> {
        let size = usize::from(*self.range.end() - *self.range.start()) + 1;
        while *tried < size {
            let port = *next;
            *next = if port >= *self.range.end() {
                *self.range.start()
            } else {
                port + 1
            };
            *tried += 1;
            // Listening, so that the ssh port can be handed to its task as it is.
            if let Ok(listener) = TcpListener::bind((self.address, port)) {
                return Ok((port, listener));
            }
        }
        Err(std::io::Error::other(format!(
            "every port of {}–{} is taken (rest-lite serve --port-range)",
            self.range.start(),
            self.range.end()
        )))
    }
}

/// A task's ports, bound by the server from their allocation until [`HeldPorts::release`]
/// (just before the task's main container starts, where its processes bind them) or
/// [`HeldPorts::hand_over`]. Dropping the last clone releases them too.
#[derive(Clone, Debug, Default)]
pub struct HeldPorts(std::sync::Arc<Mutex<Vec<(u16, TcpListener)>>>);

impl HeldPorts {
    /// Unbinds them: the task's processes may bind them now.
    pub fn release(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Port `port`'s listener, still bound, for the task to take over; the port is no
    /// longer held here.
    pub fn hand_over(&self, port: u16) -> Option<TcpListener> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = held.iter().position(|(p, _)| *p == port)?;
        Some(held.swap_remove(at).1)
    }
}

/// What [`allocate`] gives: every task's ports, and the ports themselves, held, by role
/// (Framework name) and index.
#[derive(Debug)]
pub struct Allocation {
    pub ports: TaskPorts,
    held: HashMap<String, Vec<HeldPorts>>,
}

impl Allocation {
    /// Task `index` of `role`'s held ports (none for a task that has none).
    pub fn held(&self, role: &str, index: u32) -> HeldPorts {
        self.held
            .get(role)
            .and_then(|tasks| tasks.get(index as usize))
            .cloned()
            .unwrap_or_default()
    }
}

/// Each task's ports by role (Framework name) and index: the labels and counts of its
/// role's plan, with ports of `ports`' range that are free on this host, held.
pub fn allocate(framework: &Framework, ports_range: &Ports) -> std::io::Result<Allocation> {
    let mut next = ports_range.next.lock().unwrap_or_else(|e| e.into_inner());
    let mut tried = 0;
    let mut held = HashMap::new();
    let mut plans = HashMap::new();
    for role in &framework.spec.task_roles {
        let template = role.port_plan();
        let count = usize::try_from(role.task_number).unwrap_or(0);
        let mut tasks = Vec::with_capacity(count);
        let mut listeners = Vec::with_capacity(count);
        for _ in 0..count {
            let mut plan = PortPlan::default();
            let mut bound = Vec::new();
            for (label, ports) in template.iter() {
                let range = ports_range;
                let mut mine = Vec::with_capacity(ports.len());
                for _ in ports.iter() {
                    let (port, listener) = range.take(&mut next, &mut tried)?;
                    mine.push(port);
                    bound.push((port, listener));
                }
                plan.push(label, mine)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
            }
            tasks.push(plan);
            listeners.push(HeldPorts(std::sync::Arc::new(Mutex::new(bound))));
        }
        plans.insert(role.name.clone(), tasks);
        held.insert(role.name.clone(), listeners);
    }
    Ok(Allocation {
        ports: TaskPorts::new(plans),
        held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_gets_distinct_free_ports_with_its_roles_labels() {
        let _no_fork = crate::FORKING.lock().unwrap_or_else(|e| e.into_inner());
        let framework = pai_test_support::frameworks::framework_on_ports(
            "fw",
            &[("ps", 2), ("worker", 3)],
            20000,
        );
        let range = Ports::new(31000..=31199, Ipv4Addr::LOCALHOST);
        let allocation = allocate(&framework, &range).expect("ports");
        let plans = &allocation.ports;
        let mut all: Vec<u16> = plans.plans().flat_map(|p| p.all_ports()).collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "no port twice");
        for role in &framework.spec.task_roles {
            let template = role.port_plan();
            let tasks = plans.role(&role.name);
            assert_eq!(tasks.len(), role.task_number as usize);
            for (index, plan) in tasks.iter().enumerate() {
                let labels: Vec<_> = plan.iter().map(|(l, p)| (l.to_string(), p.len())).collect();
                let expected: Vec<_> = template
                    .iter()
                    .map(|(l, p)| (l.to_string(), p.len()))
                    .collect();
                assert_eq!(labels, expected);
                // Held by the allocation, on the tasks' address alone, until the task's
                // release, then free.
                for port in plan.all_ports() {
                    assert!((31000..=31199).contains(&port), "{port} is of the range");
                    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
                        .expect_err("held until the task starts");
                    let held = allocation.held(&role.name, index as u32);
                    let listeners = held.0.lock().expect("lock");
                    let (_, listener) = listeners.iter().find(|(p, _)| *p == port).expect("held");
                    assert_eq!(
                        listener.local_addr().expect("address").ip(),
                        Ipv4Addr::LOCALHOST,
                        "bound on the task's address, never wider"
                    );
                }
                allocation.held(&role.name, index as u32).release();
                for port in plan.all_ports() {
                    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).expect("free once released");
                }
            }
        }
    }

    #[test]
    fn a_taken_port_is_skipped_and_an_exhausted_range_named() {
        let _no_fork = crate::FORKING.lock().unwrap_or_else(|e| e.into_inner());
        let taken = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 31200)).expect("bind 31200");
        let range = Ports::new(31200..=31201, Ipv4Addr::LOCALHOST);
        let one = pai_test_support::frameworks::framework_on_ports("fw", &[("w", 1)], 20000);
        let count = one.spec.task_roles[0].port_plan().all_ports().count();
        if count == 1 {
            let allocation = allocate(&one, &range).expect("31201 is free");
            assert_eq!(
                allocation
                    .ports
                    .plans()
                    .flat_map(|p| p.all_ports())
                    .collect::<Vec<_>>(),
                [31201]
            );
            // Released when the allocation (the task's launch) goes.
            drop(allocation);
        }
        let two = pai_test_support::frameworks::framework_on_ports("fw", &[("w", 2)], 20000);
        let error = allocate(&two, &range).expect_err("too few ports");
        assert!(error.to_string().contains("31200–31201"), "{error}");
        drop(taken);
    }
}
