//! Ports for tasks sharing one host: every task gets its own, each one free here when
//! handed out (the kernel picks them; all are held until the whole attempt has its
//! ports, so no two tasks get the same one).

use std::collections::HashMap;
use std::net::{Ipv4Addr, TcpListener};

use pai_contract::{Framework, PortPlan, TaskPorts};

/// Each task's ports by role (Framework name) and index: the labels and counts of its
/// role's plan, with ports that are free on this host.
pub fn allocate(framework: &Framework) -> std::io::Result<TaskPorts> {
    let mut held = Vec::new();
    let mut plans = HashMap::new();
    for role in &framework.spec.task_roles {
        let template = role.port_plan();
        let count = usize::try_from(role.task_number).unwrap_or(0);
        let mut tasks = Vec::with_capacity(count);
        for _ in 0..count {
            let mut plan = PortPlan::default();
            for (label, ports) in template.iter() {
                let mut mine = Vec::with_capacity(ports.len());
                for _ in ports {
                    let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))?;
                    mine.push(listener.local_addr()?.port());
                    held.push(listener);
                }
                plan.push(label, mine)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
            }
            tasks.push(plan);
        }
        plans.insert(role.name.clone(), tasks);
    }
    drop(held);
    Ok(TaskPorts::new(plans))
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
        let plans = allocate(&framework).expect("ports");
        let mut all: Vec<u16> = plans.plans().flat_map(|p| p.all_ports()).collect();
        let count = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), count, "no port twice");
        for role in &framework.spec.task_roles {
            let template = role.port_plan();
            let tasks = plans.role(&role.name);
            assert_eq!(tasks.len(), role.task_number as usize);
            for plan in tasks {
                let labels: Vec<_> = plan.iter().map(|(l, p)| (l.to_string(), p.len())).collect();
                let expected: Vec<_> = template
                    .iter()
                    .map(|(l, p)| (l.to_string(), p.len()))
                    .collect();
                assert_eq!(labels, expected);
                for port in plan.all_ports() {
                    TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).expect("free");
                }
            }
        }
    }
}
