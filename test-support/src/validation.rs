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

use serde_json::{Value, json};

/// One reason an object is invalid, as the API server words it in `details.causes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueInvalid`, `FieldValueNotSupported`, `FieldValueTooLong`, `FieldValueRequired`.
    pub reason: &'static str,
    /// The field's path, e.g. `spec.taskRoles[0].name`.
    pub field: String,
    /// What is wrong, e.g. `Invalid value: "a-b": spec.taskRoles[0].name in body should match '^[a-z0-9]{1,63}$'`.
    pub message: String,
}

/// The API server's rejection of an object: status 422, reason `Invalid`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    /// `Framework.frameworkcontroller.microsoft.com`, `Pod`, …
    pub kind: String,
    pub name: String,
    pub causes: Vec<Cause>,
}

impl Invalid {
    /// The `message` of the `Status` a real API server sends.
    pub fn message(&self) -> String {
        let causes: Vec<String> = self
            .causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let list = match causes.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        format!("{} {:?} is invalid: {list}", self.kind, self.name)
    }

    /// The whole `Status` object.
    pub fn status(&self) -> Value {
        let causes: Vec<Value> = self
            .causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message(), "reason": "Invalid", "code": 422,
            "details": {"name": self.name, "kind": self.kind, "causes": causes},
        })
    }
}

/// The pattern of Framework and task-role names in FrameworkController's CRD.
pub const CRD_NAME_PATTERN: &str = "^[a-z0-9]{1,63}$";
/// Kubernetes' limit on all annotations of one object together.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// A `pattern` of a string schema: its text (for messages) and a matcher for it.
type Pattern = (&'static str, fn(&str) -> bool);

/// A node of an OpenAPI v3 structural schema, as much of it as FrameworkController uses.
enum Schema {
    Object {
        properties: Vec<(&'static str, Schema)>,
        /// `x-kubernetes-preserve-unknown-fields: true`: nothing below is checked or pruned.
        preserve_unknown: bool,
        nullable: bool,
    },
    Array(Box<Schema>),
    String {
        pattern: Option<Pattern>,
        enumeration: &'static [&'static str],
        nullable: bool,
    },
    Integer {
        minimum: Option<i64>,
        maximum: Option<i64>,
        nullable: bool,
    },
    Boolean,
    /// An object whose every value has this schema (`additionalProperties`).
    Map(Box<Schema>),
    /// `x-kubernetes-int-or-string` with a Kubernetes quantity's pattern.
    Quantity,
    /// A string, `default` when absent.
    Defaulted(&'static str),
}

const INT32: (Option<i64>, Option<i64>) = (Some(i32::MIN as i64), Some(i32::MAX as i64));

fn int32() -> Schema {
    integer(INT32.0, INT32.1)
}

fn plain_string() -> Schema {
    Schema::String {
        pattern: None,
        enumeration: &[],
        nullable: false,
    }
}

/// The pattern of a quantity in the CRDs' `minResources`.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// Whether `s` is a quantity by [`QUANTITY_PATTERN`].
fn quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let number_ok = match number.split_once('.') {
        None => !number.is_empty(),
        Some((whole, fraction)) => {
            !fraction.contains('.') && (!whole.is_empty() || !fraction.is_empty())
        }
    };
    let exponent = |e: &str| {
        let e = e.strip_prefix(['+', '-']).unwrap_or(e);
        !e.is_empty()
            && e.split('.').count() <= 2
            && e.chars().all(|c| c.is_ascii_digit() || c == '.')
            && e != "."
    };
    number_ok
        && (matches!(
            suffix,
            "" | "Ki"
                | "Mi"
                | "Gi"
                | "Ti"
                | "Pi"
                | "Ei"
                | "n"
                | "u"
                | "m"
                | "k"
                | "M"
                | "G"
                | "T"
                | "P"
                | "E"
        ) || suffix.strip_prefix(['e', 'E']).is_some_and(exponent))
}

/// scheduler-plugins' PodGroup (`scheduling.x-k8s.io/v1alpha1`).
fn coscheduling_pod_group() -> Schema {
    object(vec![
        (
            "spec",
            object(vec![
                ("minMember", int32()),
                ("minResources", Schema::Map(Box::new(Schema::Quantity))),
                ("scheduleTimeoutSeconds", int32()),
            ]),
        ),
        (
            "status",
            object(vec![
                ("failed", int32()),
                ("occupiedBy", plain_string()),
                ("phase", plain_string()),
                ("running", int32()),
                ("scheduleStartTime", plain_string()),
                ("succeeded", int32()),
            ]),
        ),
    ])
}

/// Volcano's PodGroup (`scheduling.volcano.sh/v1beta1`).
fn volcano_pod_group() -> Schema {
    object(vec![
        (
            "spec",
            object(vec![
                ("minMember", int32()),
                ("minResources", Schema::Map(Box::new(Schema::Quantity))),
                ("minTaskMember", Schema::Map(Box::new(int32()))),
                (
                    "networkTopology",
                    object(vec![
                        ("highestTierAllowed", integer(None, None)),
                        (
                            "mode",
                            Schema::String {
                                pattern: None,
                                enumeration: &["hard", "soft"],
                                nullable: false,
                            },
                        ),
                    ]),
                ),
                ("priorityClassName", plain_string()),
                ("queue", Schema::Defaulted("default")),
                ("preemptable", Schema::Boolean),
            ]),
        ),
        (
            "status",
            object(vec![
                (
                    "conditions",
                    Schema::Array(Box::new(object(vec![
                        ("lastTransitionTime", plain_string()),
                        ("message", plain_string()),
                        ("reason", plain_string()),
                        ("status", plain_string()),
                        ("transitionID", plain_string()),
                        ("type", plain_string()),
                    ]))),
                ),
                ("failed", int32()),
                ("phase", plain_string()),
                ("running", int32()),
                ("succeeded", int32()),
            ]),
        ),
    ])
}

fn object(properties: Vec<(&'static str, Schema)>) -> Schema {
    Schema::Object {
        properties,
        preserve_unknown: false,
        nullable: false,
    }
}

fn preserved(nullable: bool) -> Schema {
    Schema::Object {
        properties: Vec::new(),
        preserve_unknown: true,
        nullable,
    }
}

fn integer(minimum: Option<i64>, maximum: Option<i64>) -> Schema {
    Schema::Integer {
        minimum,
        maximum,
        nullable: false,
    }
}

fn crd_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

fn crd_named() -> Schema {
    Schema::String {
        pattern: Some((CRD_NAME_PATTERN, crd_name)),
        enumeration: &[],
        nullable: false,
    }
}

fn retry_policy() -> Schema {
    object(vec![
        // ExtendedUnlimitedValue: −2 retries always, −1 failures forever.
        ("maxRetryCount", integer(Some(-2), None)),
        ("fancyRetryPolicy", Schema::Boolean),
    ])
}

/// FrameworkController's Framework schema (its `buildFrameworkSchema`).
fn framework_schema() -> Schema {
    let task_role = object(vec![
        ("name", crd_named()),
        ("taskNumber", integer(Some(0), Some(10_000))),
        (
            "frameworkAttemptCompletionPolicy",
            object(vec![
                // UnlimitedValue: −1.
                ("minFailedTaskCount", integer(Some(-1), None)),
                ("minSucceededTaskCount", integer(Some(-1), None)),
            ]),
        ),
        (
            "task",
            object(vec![
                ("retryPolicy", retry_policy()),
                (
                    "podGracefulDeletionTimeoutSec",
                    Schema::Integer {
                        minimum: None,
                        maximum: None,
                        nullable: true,
                    },
                ),
                ("pod", preserved(false)),
            ]),
        ),
    ]);
    object(vec![
        // metadata: only the name is constrained; the rest is ObjectMeta, checked apart.
        (
            "spec",
            object(vec![
                (
                    "description",
                    Schema::String {
                        pattern: None,
                        enumeration: &[],
                        nullable: true,
                    },
                ),
                (
                    "executionType",
                    Schema::String {
                        pattern: None,
                        enumeration: &["Create", "Start", "Stop"],
                        nullable: false,
                    },
                ),
                ("retryPolicy", retry_policy()),
                ("taskRoles", Schema::Array(Box::new(task_role))),
            ]),
        ),
        ("status", preserved(true)),
    ])
}

/// Checks `object` of `resource` as a real API server would, and prunes what the
/// resource's schema does not know. `Err` holds every cause at once.
pub fn admit(resource: &str, object: &mut Value) -> Result<(), Invalid> {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut causes = Vec::new();
    metadata(&object["metadata"], &mut causes);
    let kind = match resource {
        "frameworks" => {
            if !crd_name(&name) {
                causes.push(invalid(
                    "metadata.name",
                    &json!(name),
                    format!("metadata.name in body should match '{CRD_NAME_PATTERN}'"),
                ));
            }
            let schema = framework_schema();
            check(&schema, object, "", &mut causes);
            "Framework.frameworkcontroller.microsoft.com".to_string()
        }
        "configmaps" => {
            config_map(object, &mut causes);
            "ConfigMap".to_string()
        }
        "podgroups" => {
            let (schema, kind) = match object["apiVersion"].as_str() {
                Some("scheduling.x-k8s.io/v1alpha1") => {
                    (coscheduling_pod_group(), "PodGroup.scheduling.x-k8s.io")
                }
                Some("scheduling.volcano.sh/v1beta1") => {
                    (volcano_pod_group(), "PodGroup.scheduling.volcano.sh")
                }
                other => {
                    causes.push(invalid(
                        "apiVersion",
                        &json!(other),
                        "no PodGroup of that group and version is installed".into(),
                    ));
                    (self::object(Vec::new()), "PodGroup")
                }
            };
            check(&schema, object, "", &mut causes);
            kind.to_string()
        }
        "secrets" => {
            // The same key rules and size limit as a ConfigMap's; `data` values are
            // base64.
            config_map(object, &mut causes);
            for (key, value) in object["data"].as_object().into_iter().flatten() {
                use base64::Engine;
                let ok = value
                    .as_str()
                    .is_some_and(|v| base64::engine::general_purpose::STANDARD.decode(v).is_ok());
                if !ok {
                    causes.push(invalid(
                        &format!("data[{key}]"),
                        value,
                        "illegal base64 data".into(),
                    ));
                }
            }
            "Secret".to_string()
        }
        "serviceaccounts" => {
            let automount = &object["automountServiceAccountToken"];
            if !(automount.is_null() || automount.is_boolean()) {
                causes.push(invalid(
                    "automountServiceAccountToken",
                    automount,
                    "must be a boolean".into(),
                ));
            }
            "ServiceAccount".to_string()
        }
        "roles" => {
            for (i, rule) in object["rules"].as_array().into_iter().flatten().enumerate() {
                policy_rule(rule, &format!("rules[{i}]"), &mut causes);
            }
            "Role.rbac.authorization.k8s.io".to_string()
        }
        "rolebindings" => {
            role_binding(object, &mut causes);
            "RoleBinding.rbac.authorization.k8s.io".to_string()
        }
        "events" => {
            event(object, &mut causes);
            "Event.events.k8s.io".to_string()
        }
        "pods" => {
            pod_volumes(&object["spec"], &mut causes);
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

/// A pod's volumes and its containers' mounts as the API server's `ValidatePodSpec`
/// checks them: volume names unique DNS-1123 labels, a `persistentVolumeClaim` volume
/// naming its claim, every mount naming a volume of the pod, at a path given once per
/// container, with a relative `subPath` that does not leave the volume.
fn pod_volumes(spec: &Value, causes: &mut Vec<Cause>) {
    let mut names: Vec<&str> = Vec::new();
    for (i, volume) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
        let field = format!("spec.volumes[{i}]");
        let name = volume["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push(required(&format!("{field}.name"), ""));
        } else if !dns_label(name) {
            causes.push(invalid(
                &format!("{field}.name"),
                &volume["name"],
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'".into(),
            ));
        } else if names.contains(&name) {
            causes.push(Cause {
                reason: "FieldValueDuplicate",
                field: format!("{field}.name"),
                message: format!("Duplicate value: {:?}", name),
            });
        }
        names.push(name);
        let claim = &volume["persistentVolumeClaim"];
        if claim.is_object() && claim["claimName"].as_str().is_none_or(str::is_empty) {
            causes.push(required(
                &format!("{field}.persistentVolumeClaim.claimName"),
                "",
            ));
        }
    }
    for kind in ["initContainers", "containers"] {
        for (c, container) in spec[kind].as_array().into_iter().flatten().enumerate() {
            let mut paths: Vec<&str> = Vec::new();
            let mounts = container["volumeMounts"].as_array().into_iter().flatten();
            for (m, mount) in mounts.enumerate() {
                let field = format!("spec.{kind}[{c}].volumeMounts[{m}]");
                let name = mount["name"].as_str().unwrap_or_default();
                if !names.contains(&name) {
                    causes.push(Cause {
                        reason: "FieldValueNotFound",
                        field: format!("{field}.name"),
                        message: format!("Not found: {name:?}"),
                    });
                }
                let path = mount["mountPath"].as_str().unwrap_or_default();
                if path.is_empty() {
                    causes.push(required(&format!("{field}.mountPath"), ""));
                } else if paths.contains(&path) {
                    causes.push(invalid(
                        &format!("{field}.mountPath"),
                        &mount["mountPath"],
                        "must be unique".into(),
                    ));
                }
                paths.push(path);
                if let Some(sub) = mount["subPath"].as_str()
                    && (sub.starts_with('/') || sub.split('/').any(|p| p == ".."))
                {
                    causes.push(invalid(
                        &format!("{field}.subPath"),
                        &mount["subPath"],
                        "must be a relative path without '..'".into(),
                    ));
                }
            }
        }
    }
}

/// An `events.k8s.io/v1` Event as the API server's validation of a create checks it
/// (Kubernetes' `ValidateEventCreate` for that version): `eventTime` set;
/// `reportingController` a qualified name; `reportingInstance`, `action` and `reason`
/// set and at most 128 characters; `note` at most 1 kB; `type` Normal or Warning; and
/// the regarding object in the Event's namespace.
fn event(object: &Value, causes: &mut Vec<Cause>) {
    if object["eventTime"].as_str().is_none_or(str::is_empty) {
        causes.push(required("eventTime", "needs to be set"));
    }
    let controller = object["reportingController"].as_str().unwrap_or_default();
    if controller.is_empty() {
        causes.push(required("reportingController", ""));
    } else if !qualified_name(controller) {
        causes.push(invalid(
            "reportingController",
            &object["reportingController"],
            "must be a qualified name".into(),
        ));
    }
    for field in ["reportingInstance", "action", "reason"] {
        let value = object[field].as_str().unwrap_or_default();
        if value.is_empty() {
            causes.push(required(field, ""));
        } else if value.len() > 128 {
            causes.push(invalid(
                field,
                &object[field],
                "can have at most 128 characters".into(),
            ));
        }
    }
    if object["note"].as_str().is_some_and(|n| n.len() > 1024) {
        causes.push(invalid(
            "note",
            &object["note"],
            "can have at most 1024 characters".into(),
        ));
    }
    let kind = &object["type"];
    if !matches!(kind.as_str(), Some("Normal" | "Warning")) {
        causes.push(not_supported("type", kind, &["Normal", "Warning"]));
    }
    let namespace = &object["metadata"]["namespace"];
    let regarding = &object["regarding"]["namespace"];
    if !regarding.is_null() && !namespace.is_null() && regarding != namespace {
        causes.push(invalid(
            "regarding.namespace",
            regarding,
            "does not match event.namespace".into(),
        ));
    }
}

fn required(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired",
        field: field.to_string(),
        message: format!("Required value: {detail}"),
    }
}

fn not_supported(field: &str, value: &Value, supported: &[&str]) -> Cause {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported",
        field: field.to_string(),
        message: format!(
            "Unsupported value: {value}: supported values: {}",
            list.join(", ")
        ),
    }
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// A rule of a (namespaced) Role, by Kubernetes' RBAC validation: at least one verb; no
/// non-resource URLs in a namespaced rule; a resource rule names at least one API group
/// and one resource.
fn policy_rule(rule: &Value, path: &str, causes: &mut Vec<Cause>) {
    for field in [
        "apiGroups",
        "resources",
        "verbs",
        "resourceNames",
        "nonResourceURLs",
    ] {
        let value = &rule[field];
        let ok = value.is_null()
            || value
                .as_array()
                .is_some_and(|items| items.iter().all(Value::is_string));
        if !ok {
            causes.push(invalid(
                &join(path, field),
                value,
                "must be a list of strings".into(),
            ));
        }
    }
    if strings(&rule["verbs"]).is_empty() {
        causes.push(required(
            &join(path, "verbs"),
            "verbs must contain at least one value",
        ));
    }
    if !strings(&rule["nonResourceURLs"]).is_empty() {
        causes.push(invalid(
            &join(path, "nonResourceURLs"),
            &rule["nonResourceURLs"],
            "namespaced rules cannot apply to non-resource URLs".into(),
        ));
        return;
    }
    if rule["apiGroups"].as_array().is_none_or(Vec::is_empty) {
        causes.push(required(
            &join(path, "apiGroups"),
            "resource rules must supply at least one api group",
        ));
    }
    if strings(&rule["resources"]).is_empty() {
        causes.push(required(
            &join(path, "resources"),
            "resource rules must supply at least one resource",
        ));
    }
}

/// A RoleBinding, by Kubernetes' RBAC validation: `roleRef` in the RBAC group, of kind
/// Role or ClusterRole, with a name; each subject of a known kind with a name, a
/// ServiceAccount's in no API group and with a valid name.
fn role_binding(binding: &Value, causes: &mut Vec<Cause>) {
    let role_ref = &binding["roleRef"];
    if role_ref["apiGroup"].as_str() != Some("rbac.authorization.k8s.io") {
        causes.push(not_supported(
            "roleRef.apiGroup",
            &role_ref["apiGroup"],
            &["rbac.authorization.k8s.io"],
        ));
    }
    if !matches!(role_ref["kind"].as_str(), Some("Role" | "ClusterRole")) {
        causes.push(not_supported(
            "roleRef.kind",
            &role_ref["kind"],
            &["Role", "ClusterRole"],
        ));
    }
    if role_ref["name"].as_str().is_none_or(str::is_empty) {
        causes.push(required("roleRef.name", "name is required"));
    }
    for (i, subject) in binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let path = format!("subjects[{i}]");
        let name = subject["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push(required(&join(&path, "name"), "name is required"));
        }
        match subject["kind"].as_str() {
            Some("ServiceAccount") => {
                if !subject["apiGroup"].as_str().unwrap_or_default().is_empty() {
                    causes.push(not_supported(
                        &join(&path, "apiGroup"),
                        &subject["apiGroup"],
                        &[""],
                    ));
                }
                if !name.is_empty() && !dns_subdomain(name) {
                    causes.push(invalid(
                        &join(&path, "name"),
                        &subject["name"],
                        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'".into(),
                    ));
                }
            }
            Some("User" | "Group") => {
                if subject["apiGroup"].as_str() != Some("rbac.authorization.k8s.io") {
                    causes.push(not_supported(
                        &join(&path, "apiGroup"),
                        &subject["apiGroup"],
                        &["rbac.authorization.k8s.io"],
                    ));
                }
            }
            _ => causes.push(not_supported(
                &join(&path, "kind"),
                &subject["kind"],
                &["ServiceAccount", "User", "Group"],
            )),
        }
    }
}

fn invalid(field: &str, value: &Value, detail: String) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        field: field.to_string(),
        message: format!("Invalid value: {value}: {detail}"),
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn check(schema: &Schema, value: &mut Value, path: &str, causes: &mut Vec<Cause>) {
    let wrong_type = |expected: &str, value: &Value, causes: &mut Vec<Cause>| {
        causes.push(invalid(
            path,
            &json!(type_name(value)),
            format!(
                "{path} in body must be of type {expected}: {:?}",
                type_name(value)
            ),
        ));
    };
    match schema {
        Schema::Object {
            properties,
            preserve_unknown,
            nullable,
        } => {
            if value.is_null() && *nullable {
                return;
            }
            let Some(fields) = value.as_object_mut() else {
                return wrong_type("object", value, causes);
            };
            if *preserve_unknown {
                return;
            }
            // Pruning: a structural schema drops what it does not describe (metadata is
            // ObjectMeta, kept apart).
            let top = path.is_empty();
            fields.retain(|k, _| {
                (top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                    || properties.iter().any(|(name, _)| name == k)
            });
            for (name, schema) in properties {
                if let (Schema::Defaulted(default), None) = (schema, fields.get(*name)) {
                    fields.insert(name.to_string(), json!(default));
                }
                if let Some(child) = fields.get_mut(*name) {
                    check(schema, child, &join(path, name), causes);
                }
            }
        }
        Schema::Array(items) => {
            let Some(elements) = value.as_array_mut() else {
                return wrong_type("array", value, causes);
            };
            for (i, element) in elements.iter_mut().enumerate() {
                check(items, element, &format!("{path}[{i}]"), causes);
            }
        }
        Schema::String {
            pattern,
            enumeration,
            nullable,
        } => {
            if value.is_null() && *nullable {
                return;
            }
            let Some(s) = value.as_str() else {
                return wrong_type("string", value, causes);
            };
            if let Some((pattern, matches)) = pattern
                && !matches(s)
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should match '{pattern}'"),
                ));
            }
            if !enumeration.is_empty() && !enumeration.contains(&s) {
                let supported: Vec<String> = enumeration.iter().map(|e| format!("{e:?}")).collect();
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: path.to_string(),
                    message: format!(
                        "Unsupported value: {value}: supported values: {}",
                        supported.join(", ")
                    ),
                });
            }
        }
        Schema::Integer {
            minimum,
            maximum,
            nullable,
        } => {
            if value.is_null() && *nullable {
                return;
            }
            let Some(n) = value.as_i64() else {
                return wrong_type("integer", value, causes);
            };
            if let Some(min) = minimum
                && n < *min
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should be greater than or equal to {min}"),
                ));
            }
            if let Some(max) = maximum
                && n > *max
            {
                causes.push(invalid(
                    path,
                    value,
                    format!("{path} in body should be less than or equal to {max}"),
                ));
            }
        }
        Schema::Boolean => {
            if !value.is_boolean() {
                wrong_type("boolean", value, causes);
            }
        }
        Schema::Map(values) => {
            let Some(fields) = value.as_object_mut() else {
                return wrong_type("object", value, causes);
            };
            for (key, child) in fields.iter_mut() {
                check(values, child, &join(path, key), causes);
            }
        }
        Schema::Quantity => match value {
            Value::Number(n) if n.is_i64() || n.is_u64() => {}
            Value::String(s) if quantity(s) => {}
            Value::String(_) => causes.push(invalid(
                path,
                value,
                format!("{path} in body should match '{QUANTITY_PATTERN}'"),
            )),
            other => wrong_type("integer or string", other, causes),
        },
        Schema::Defaulted(_) => {
            if !value.is_string() {
                wrong_type("string", value, causes);
            }
        }
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63.
fn dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
        && b.iter()
            .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
}

/// Dot-separated DNS labels, at most 253.
fn dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label)
}

/// A label value or a key's name part: `(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?`.
fn qualified_part(s: &str, may_be_empty: bool) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return may_be_empty;
    }
    b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain.
fn qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => dns_subdomain(prefix) && qualified_part(name, false),
        None => qualified_part(key, false),
    }
}

/// A ConfigMap's keys (`[-._a-zA-Z0-9]+`, at most 253) and its size: `data` and
/// `binaryData` (decoded) together at most 1 MiB, as the API server's validation says.
fn config_map(object: &Value, causes: &mut Vec<Cause>) {
    let mut total = 0;
    for field in ["data", "binaryData"] {
        let Some(entries) = object[field].as_object() else {
            continue;
        };
        for (key, value) in entries {
            let ok = (1..=253).contains(&key.len())
                && key
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
            if !ok {
                causes.push(invalid(
                    &format!("{field}[{key}]"),
                    &json!(key),
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
                        .into(),
                ));
            }
            // `binaryData` is counted as the bytes it encodes, as the API server counts
            // it (its values are bytes; base64 is only their JSON form).
            let text = value.as_str().unwrap_or_default();
            let bytes = match field {
                "binaryData" => {
                    let pad = text.bytes().rev().take_while(|b| *b == b'=').count();
                    (text.len() / 4 * 3).saturating_sub(pad)
                }
                _ => text.len(),
            };
            total += key.len() + bytes;
        }
    }
    if total > MAX_CONFIG_MAP_BYTES {
        causes.push(Cause {
            reason: "FieldValueTooLong",
            field: "data".into(),
            message: format!("Too long: must have at most {MAX_CONFIG_MAP_BYTES} bytes"),
        });
    }
}

/// The most a ConfigMap may hold.
pub const MAX_CONFIG_MAP_BYTES: usize = 1024 * 1024;

fn metadata(meta: &Value, causes: &mut Vec<Cause>) {
    for (i, owner) in meta["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for field in ["apiVersion", "kind", "name", "uid"] {
            if owner[field].as_str().is_none_or(str::is_empty) {
                causes.push(invalid(
                    &format!("metadata.ownerReferences[{i}].{field}"),
                    &owner[field],
                    format!("{field} must not be empty"),
                ));
            }
        }
    }
    let name = meta["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            field: "metadata.name".into(),
            message: "Required value: name or generateName is required".into(),
        });
    } else if !dns_subdomain(name) {
        causes.push(invalid(
            "metadata.name",
            &json!(name),
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into(),
        ));
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (key, value) in labels {
            if !qualified_name(key) {
                causes.push(invalid(
                    "metadata.labels",
                    &json!(key),
                    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                ));
            }
            if !value.as_str().is_some_and(|v| qualified_part(v, true)) {
                causes.push(invalid(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character, at most 63 characters".into(),
                ));
            }
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        let mut total = 0;
        for (key, value) in annotations {
            if !qualified_name(key) {
                causes.push(invalid(
                    "metadata.annotations",
                    &json!(key),
                    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into(),
                ));
            }
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > MAX_ANNOTATIONS_BYTES {
            causes.push(Cause {
                reason: "FieldValueTooLong",
                field: "metadata.annotations".into(),
                message: format!("Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes"),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framework(name: &str, role: &str, tasks: i64) -> Value {
        json!({
            "apiVersion": "frameworkcontroller.microsoft.com/v1", "kind": "Framework",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "rest-lite"}},
            "spec": {"executionType": "Start", "retryPolicy": {"fancyRetryPolicy": true, "maxRetryCount": 0},
                "taskRoles": [{"name": role, "taskNumber": tasks,
                    "frameworkAttemptCompletionPolicy": {"minFailedTaskCount": 1, "minSucceededTaskCount": -1},
                    "task": {"retryPolicy": {"fancyRetryPolicy": false, "maxRetryCount": 0},
                        "pod": {"spec": {"anything": ["kept"]}}}}]},
        })
    }

    #[test]
    fn config_maps_have_valid_keys_and_fit_one_mebibyte() {
        let map = |key: &str, size: usize| json!({"metadata": {"name": "fw-peers-0"}, "data": {key: "x".repeat(size)}});
        admit("configmaps", &mut map("peers.json", 1000)).expect("valid");
        // binaryData counts as the bytes it encodes: 900 KiB is 1.2 MB of base64.
        let binary = |size: usize| json!({"metadata": {"name": "fw-logs"}, "binaryData": {"a.0.main": "AAAA".repeat(size / 3)}});
        admit("configmaps", &mut binary(900 * 1024)).expect("900 KiB fits");
        admit("configmaps", &mut binary(MAX_CONFIG_MAP_BYTES)).expect_err("1 MiB and a key do not");
        let err =
            admit("configmaps", &mut map("peers.json", MAX_CONFIG_MAP_BYTES)).expect_err("big");
        assert!(
            err.message().contains("must have at most 1048576 bytes"),
            "{}",
            err.message()
        );
        let err = admit("configmaps", &mut map("a/b", 1)).expect_err("bad key");
        assert!(err.message().contains("data[a/b]"), "{}", err.message());
        let mut owned = map("k", 1);
        owned["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "Framework", "name": "fw", "uid": ""}]);
        let err = admit("configmaps", &mut owned).expect_err("owner without uid");
        assert!(
            err.message().contains("ownerReferences[0].uid"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn events_have_what_the_events_api_requires() {
        let good = json!({"metadata": {"name": "fw.1", "namespace": "jobs"},
            "eventTime": "2026-11-24T10:00:00.000000Z", "reportingController": "rest-lite.openpai.io/server",
            "reportingInstance": "rest-lite-0", "action": "Run", "reason": "TaskFailed",
            "note": "worker-1 failed", "type": "Warning",
            "regarding": {"kind": "Framework", "name": "fw", "namespace": "jobs"}});
        assert_eq!(admit("events", &mut good.clone()), Ok(()));
        let mut bad = good;
        bad["eventTime"] = Value::Null;
        bad["reportingController"] = json!("not a/qualified/name");
        bad["reason"] = json!("R".repeat(129));
        bad["note"] = json!("n".repeat(1025));
        bad["type"] = json!("Error");
        bad["regarding"]["namespace"] = json!("other");
        let causes = admit("events", &mut bad).expect_err("invalid").causes;
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "eventTime",
                "reportingController",
                "reason",
                "note",
                "type",
                "regarding.namespace"
            ]
        );
    }

    #[test]
    fn rbac_objects_have_the_shape_kubernetes_requires() {
        let mut good_role = json!({"metadata": {"name": "fw-job"}, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["x"], "verbs": ["get"]}]});
        assert_eq!(admit("roles", &mut good_role), Ok(()));
        let mut bad_role = json!({"metadata": {"name": "fw-job"}, "rules": [
            {"resources": ["configmaps"], "verbs": []},
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]});
        let causes = admit("roles", &mut bad_role).expect_err("invalid").causes;
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "rules[0].verbs",
                "rules[0].apiGroups",
                "rules[1].nonResourceURLs"
            ]
        );
        let mut good_binding = json!({"metadata": {"name": "fw-job"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "fw-job"},
            "subjects": [{"kind": "ServiceAccount", "name": "fw-job", "namespace": "jobs"}]});
        assert_eq!(admit("rolebindings", &mut good_binding), Ok(()));
        let mut bad_binding = json!({"metadata": {"name": "fw-job"},
            "roleRef": {"apiGroup": "", "kind": "Secret"},
            "subjects": [{"kind": "ServiceAccount", "apiGroup": "rbac.authorization.k8s.io", "name": "Bad_Name"},
                         {"kind": "Robot", "name": "r"}]});
        let causes = admit("rolebindings", &mut bad_binding)
            .expect_err("invalid")
            .causes;
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "roleRef.apiGroup",
                "roleRef.kind",
                "roleRef.name",
                "subjects[0].apiGroup",
                "subjects[0].name",
                "subjects[1].kind"
            ]
        );
        let mut account =
            json!({"metadata": {"name": "fw-job"}, "automountServiceAccountToken": "no"});
        assert!(admit("serviceaccounts", &mut account).is_err());
    }

    #[test]
    fn secrets_hold_base64() {
        let mut good = json!({"metadata": {"name": "fw-ssh"}, "data": {"id_ed25519": "aGk="}});
        admit("secrets", &mut good).expect("valid");
        let mut bad = json!({"metadata": {"name": "fw-ssh"}, "data": {"id": "not base64!"}});
        let err = admit("secrets", &mut bad).expect_err("invalid");
        assert!(err.message().contains("data[id]"), "{}", err.message());
    }

    #[test]
    fn a_valid_framework_is_admitted_and_pruned() {
        let mut f = framework("abc123", "worker", 2);
        f["spec"]["unknown"] = json!(1);
        f["spec"]["taskRoles"][0]["task"]["unknown"] = json!(1);
        f["status"] = json!({"anything": 1});
        admit("frameworks", &mut f).expect("valid");
        assert!(f["spec"].get("unknown").is_none(), "pruned");
        assert!(f["spec"]["taskRoles"][0]["task"].get("unknown").is_none());
        assert_eq!(
            f["spec"]["taskRoles"][0]["task"]["pod"]["spec"]["anything"][0],
            "kept"
        );
        assert_eq!(f["status"]["anything"], 1, "status keeps unknown fields");
    }

    #[test]
    fn the_crd_rules_are_enforced_all_at_once() {
        let mut f = framework("alice--tfdemo", "ps-0", 10_001);
        f["spec"]["executionType"] = json!("Run");
        f["spec"]["retryPolicy"]["maxRetryCount"] = json!(-3);
        f["spec"]["taskRoles"][0]["frameworkAttemptCompletionPolicy"]["minFailedTaskCount"] =
            json!(-2);
        let invalid = admit("frameworks", &mut f).expect_err("invalid");
        let fields: Vec<&str> = invalid.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.name",
                "spec.executionType",
                "spec.retryPolicy.maxRetryCount",
                "spec.taskRoles[0].name",
                "spec.taskRoles[0].taskNumber",
                "spec.taskRoles[0].frameworkAttemptCompletionPolicy.minFailedTaskCount",
            ]
        );
        assert!(invalid.message().starts_with(
            "Framework.frameworkcontroller.microsoft.com \"alice--tfdemo\" is invalid: [metadata.name: Invalid value: \"alice--tfdemo\": metadata.name in body should match '^[a-z0-9]{1,63}$'"
        ), "{}", invalid.message());
    }

    #[test]
    fn a_pods_mounts_name_its_volumes() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "volumes": [
                {"name": "data-volume", "persistentVolumeClaim": {"claimName": ""}},
                {"name": "data-volume", "emptyDir": {}},
            ],
            "containers": [{"name": "main", "volumeMounts": [
                {"name": "data-volume", "mountPath": "/mnt/data"},
                {"name": "other", "mountPath": "/mnt/data", "subPath": "../x"},
            ]}],
        }});
        let invalid = admit("pods", &mut pod).expect_err("invalid");
        let fields: Vec<&str> = invalid.causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.volumes[0].persistentVolumeClaim.claimName",
                "spec.volumes[1].name",
                "spec.containers[0].volumeMounts[1].name",
                "spec.containers[0].volumeMounts[1].mountPath",
                "spec.containers[0].volumeMounts[1].subPath",
            ]
        );
        let mut ok = json!({"metadata": {"name": "p"}, "spec": {
            "volumes": [{"name": "data-volume", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [{"name": "main", "volumeMounts": [
                {"name": "data-volume", "mountPath": "/mnt/data", "subPath": "alice"}]}],
        }});
        admit("pods", &mut ok).expect("valid");
    }

    #[test]
    fn metadata_rules_hold_for_every_resource() {
        let mut pod = json!({"metadata": {"name": "p", "labels": {"a": "-x"},
            "annotations": {"big": "x".repeat(MAX_ANNOTATIONS_BYTES)}}});
        let invalid = admit("pods", &mut pod).expect_err("invalid");
        assert_eq!(invalid.kind, "Pod");
        let reasons: Vec<&str> = invalid.causes.iter().map(|c| c.reason).collect();
        assert_eq!(reasons, ["FieldValueInvalid", "FieldValueTooLong"]);
        let mut ok = json!({"metadata": {"name": "a.b-c", "labels": {"example.com/x": ""}}});
        admit("configmaps", &mut ok).expect("valid");
    }
}
