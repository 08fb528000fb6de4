//! Each job's own ServiceAccount, Role and RoleBinding (see [`pai_contract::access`]):
//! the job's pods may `get`, `list` and `watch` their own Framework and their own peer
//! table, by name, and nothing else (whatever the number of tasks, the Role is the same
//! size). Made before the Framework (the pods' admission
//! needs the account, the barriers the grant), then owned by it, so the garbage
//! collector removes them with the job.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use pai_contract::framework::{GROUP, PLURAL};
use pai_contract::{Framework, access};

/// The RBAC API group.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The three objects of `framework`'s (not yet created: no owner) access.
pub struct JobAccess {
    pub account: ServiceAccount,
    pub role: Role,
    pub binding: RoleBinding,
}

/// What the Role allows: each rule names its objects.
pub fn rules(framework: &Framework) -> Vec<PolicyRule> {
    let rule = |group: &str, resource: &str, names: Vec<String>, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(vec![resource.to_string()]),
        resource_names: Some(names),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        non_resource_urls: None,
    };
    let name = framework.name();
    vec![
        rule(GROUP, PLURAL, vec![name.to_string()], access::VERBS),
        rule(
            "",
            "configmaps",
            vec![access::peer_table(name)],
            access::VERBS,
        ),
    ]
}

impl JobAccess {
    pub fn of(framework: &Framework) -> Self {
        let name = access::job_account(framework.name());
        let metadata = ObjectMeta {
            name: Some(name.clone()),
            namespace: framework.metadata.namespace.clone(),
            labels: Some(framework.metadata.labels.clone().unwrap_or_default()),
            ..ObjectMeta::default()
        };
        Self {
            account: ServiceAccount {
                metadata: metadata.clone(),
                // The runtime's containers get a token by a projected volume.
                automount_service_account_token: Some(false),
                ..ServiceAccount::default()
            },
            role: Role {
                metadata: metadata.clone(),
                rules: Some(rules(framework)),
            },
            binding: RoleBinding {
                metadata,
                role_ref: RoleRef {
                    api_group: RBAC_GROUP.to_string(),
                    kind: "Role".to_string(),
                    name: name.clone(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".to_string(),
                    name,
                    namespace: framework.metadata.namespace.clone(),
                    api_group: None,
                }]),
            },
        }
    }
}
