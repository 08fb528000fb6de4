//! frameworkbarrier's `injector.sh`, so that a FrameworkController user who sources it
//! can swap frameworkbarrier's image for ours and keep their script. The same lines as
//! frameworkbarrier writes (read from `pkg/barrier/barrier.go`): for each role, in the
//! Framework's order, `FB_<ROLE>_IPS` (every task's address by index, comma-separated),
//! then for each role `FB_<ROLE>_ADDRESSES` (each address with `:${FB_<ROLE>_PORT}`,
//! a port the caller sets before sourcing), each exported and echoed.
//!
//! One difference: a role name with `-` (Kubernetes allows it) makes frameworkbarrier
//! write `export FB_MY-ROLE_IPS=…`, which no shell accepts; here `-` becomes `_`.

use std::fmt::Write;

use crate::peers::PeerTable;

/// The file's name, as frameworkbarrier names it.
pub const FILE: &str = "injector.sh";

/// `FB_<ROLE>_<suffix>` for the Framework's role `kube_name`.
pub fn variable(kube_name: &str, suffix: &str) -> String {
    format!(
        "FB_{}_{suffix}",
        kube_name.to_ascii_uppercase().replace('-', "_")
    )
}

/// The script for `peers` (every task has an address: the barrier passed).
pub fn script(peers: &PeerTable) -> String {
    let mut out = String::from("#!/bin/bash\n");
    let start = format!("./{FILE}");
    let _ = write!(
        out,
        "\necho {start}: Start to inject environment variables\n\n"
    );
    for role in &peers.roles {
        let name = variable(&role.kube_name, "IPS");
        let ips: Vec<String> = role.addresses.iter().map(|ip| ip.to_string()).collect();
        let _ = write!(
            out,
            "export {name}={}\necho {name}=${{{name}}}\n",
            ips.join(",")
        );
    }
    out.push('\n');
    for role in &peers.roles {
        let name = variable(&role.kube_name, "ADDRESSES");
        let port = variable(&role.kube_name, "PORT");
        let addresses: Vec<String> = role
            .addresses
            .iter()
            .map(|ip| format!("{ip}:${{{port}}}"))
            .collect();
        let _ = write!(
            out,
            "export {name}={}\necho {name}=${{{name}}}\n",
            addresses.join(",")
        );
    }
    let _ = writeln!(
        out,
        "\necho {start}: Succeeded to inject environment variables"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_frameworkbarriers_and_always_shell_names() {
        assert_eq!(variable("worker", "IPS"), "FB_WORKER_IPS");
        assert_eq!(variable("param-server", "PORT"), "FB_PARAM_SERVER_PORT");
    }
}
