//! What a real API server checks before it stores an object, for the objects our code
//! writes: Kubernetes' object-metadata rules (names, labels, annotations) for every
//! resource, and for `frameworks` the schema FrameworkController registers with its CRD
//! (`pkg/apis/frameworkcontroller/v1/crd.go`), including the pruning of fields the schema
//! does not know.
//!
//! Written from the published rules, independently of the production code that should
//! obey them: a rule both got wrong the same way would pass here.
//!
//! For `podgroups`, the schema of the `PodGroup` the object's `apiVersion` names, as
//! each project's CRD publishes it: scheduler-plugins' `scheduling.x-k8s.io/v1alpha1`
//! (`manifests/coscheduling/crd.yaml`) and Volcano's `scheduling.volcano.sh/v1beta1`
//! (`config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml`): int32 counts,
//! `minResources` values that are integers or quantity strings, Volcano's `queue`
//! defaulted to `default`, and the pruning of unknown fields. A PodGroup of another
//! group, or with none installed, is refused as the API server refuses an unknown kind.
//!
//! Not checked: the pod template inside a Framework beyond its shape (FrameworkController
//! stores it as given, the API server validates the pods it creates later), other
//! resources' schemas, admission webhooks.

mod causes;
mod config_maps;
mod events;
mod framework;
mod metadata;
mod pod_groups;
mod pods;
mod rbac;
mod schema;

use serde_json::Value;

pub use causes::{Cause, Invalid};
pub use config_maps::MAX_CONFIG_MAP_BYTES;
pub use framework::CRD_NAME_PATTERN;
pub use metadata::MAX_ANNOTATIONS_BYTES;
pub use schema::QUANTITY_PATTERN;

/// Checks `object` of `resource` as a real API server would, and prunes what the
/// resource's schema does not know. `Err` holds every cause at once.
pub fn admit(resource: &str, object: &mut Value) -> Result<(), Invalid> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut causes = Vec::new();
    metadata::metadata(&object["metadata"], &mut causes);
    let kind = match resource {
        "frameworks" => {
            framework::framework(&name, object, &mut causes);
            "Framework.frameworkcontroller.microsoft.com".to_string()
        }
        "configmaps" => {
            config_maps::config_map(object, &mut causes);
            "ConfigMap".to_string()
        }
        "podgroups" => pod_groups::pod_group(object, &mut causes).to_string(),
        "secrets" => {
            config_maps::secret(object, &mut causes);
            "Secret".to_string()
        }
        "serviceaccounts" => {
            rbac::service_account(object, &mut causes);
            "ServiceAccount".to_string()
        }
        "roles" => {
            rbac::role(object, &mut causes);
            "Role.rbac.authorization.k8s.io".to_string()
        }
        "rolebindings" => {
            rbac::role_binding(object, &mut causes);
            "RoleBinding.rbac.authorization.k8s.io".to_string()
        }
        "events" => {
            events::event(object, &mut causes);
            "Event.events.k8s.io".to_string()
        }
        "pods" => {
            pods::pod_volumes(&object["spec"], &mut causes);
            "Pod".to_string()
        }
        other => {
            let mut kind = other.trim_end_matches('s').to_string();
            if let Some(first) = kind.get_mut(..1) {
                first.make_ascii_uppercase();
            }
            kind
        }
    };
    if causes.is_empty() {
        Ok(())
    } else {
        Err(Invalid { kind, name, causes })
    }
}
