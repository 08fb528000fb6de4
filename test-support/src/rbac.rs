//! Kubernetes' RBAC authorizer, for the requests our programs make: which rules allow a
//! request, and whether one set of rules holds everything another grants (the API
//! server's escalation check: a subject may create a Role only with permissions it holds
//! itself). Written from the published rules (the RBAC documentation and the API's
//! request attributes), independently of the production code that builds the rules.
//!
//! The request's attributes are read from its URL as the API server reads them:
//! - `GET` of an object is `get`; of a collection `list`, or `watch` with `watch=true`;
//!   `POST` is `create`, `PUT` `update`, `PATCH` `patch`, `DELETE` of an object `delete`,
//!   of a collection `deletecollection`.
//! - A subresource (`pods/NAME/log`) is the resource `pods/log`.
//! - A rule with `resourceNames` allows a request only for an object so named; a `list`
//!   or `watch` counts as for that object when its field selector is `metadata.name=NAME`;
//!   a `create` never does.
//!
//! Not modelled: ClusterRoles and their aggregation, non-resource URLs, `*` in
//! `resourceNames`, the `bind`/`escalate` verbs, impersonation.

use serde_json::Value;

/// What a request asks, as the authorizer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    /// `""` for the core group.
    pub group: String,
    /// With the subresource: `pods/log`.
    pub resource: String,
    pub namespace: String,
    /// The object's name, from the path or a `metadata.name` field selector.
    pub name: Option<String>,
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Attributes {
    /// The attributes of a request (`method`, `uri` with its query); the namespace is
    /// `""` for a cluster-scoped resource (allowed by a ClusterRole's rules only); `None`
    /// for a URL that names no resource.
    pub fn of(method: &str, uri: &str) -> Option<Self> {
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let (group, rest) = match parts.as_slice() {
            ["api", "v1", rest @ ..] => (String::new(), rest),
            ["apis", group, _version, rest @ ..] => (group.to_string(), rest),
            _ => return None,
        };
        let (namespace, resource, rest) = match rest {
            ["namespaces", namespace, resource, rest @ ..] => (*namespace, *resource, rest),
            [resource, rest @ ..] => ("", *resource, rest),
            [] => return None,
        };
        let (name, subresource) = match rest {
            [] => (None, None),
            [name] => (Some(decode(name)), None),
            [name, sub] => (Some(decode(name)), Some(*sub)),
            _ => return None,
        };
        let params: Vec<(String, String)> = query
            .split('&')
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (decode(k), decode(v)))
            .collect();
        let param = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let watch = matches!(param("watch"), Some("true" | "1"));
        let verb = match (method, name.is_some()) {
            ("GET", true) => "get",
            ("GET", false) if watch => "watch",
            ("GET", false) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", true) => "delete",
            ("DELETE", false) => "deletecollection",
            _ => return None,
        };
        // A list or watch of one object by name is authorized as for that object.
        let selected = param("fieldSelector").and_then(|selector| {
            let terms: Vec<&str> = selector.split(',').collect();
            match terms.as_slice() {
                [term] => term.strip_prefix("metadata.name=").map(str::to_string),
                _ => None,
            }
        });
        let name = match verb {
            "create" => None,
            "list" | "watch" => selected,
            _ => name,
        };
        Some(Self {
            verb: verb.to_string(),
            group,
            resource: match subresource {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_string(),
            },
            namespace: namespace.to_string(),
            name,
        })
    }
}

fn listed<'a>(rule: &'a Value, field: &str) -> Vec<&'a str> {
    rule[field]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

fn matches(allowed: &[&str], wanted: &str) -> bool {
    allowed.iter().any(|a| *a == "*" || *a == wanted)
}

/// Whether `rule` (a PolicyRule as JSON) allows `request`.
pub fn rule_allows(rule: &Value, request: &Attributes) -> bool {
    let names = listed(rule, "resourceNames");
    matches(&listed(rule, "verbs"), &request.verb)
        && matches(&listed(rule, "apiGroups"), &request.group)
        && matches(&listed(rule, "resources"), &request.resource)
        && (names.is_empty()
            || request
                .name
                .as_deref()
                .is_some_and(|name| names.contains(&name)))
}

/// Whether any of `rules` allows `request`.
pub fn allows(rules: &[Value], request: &Attributes) -> bool {
    rules.iter().any(|rule| rule_allows(rule, request))
}

/// Whether `holder`'s rules hold every permission `granted` gives (RBAC's escalation
/// check): each verb on each resource (and name) a granted rule covers is covered by a
/// rule of the holder.
pub fn covers(holder: &[Value], granted: &[Value]) -> bool {
    granted.iter().all(|rule| {
        let names = listed(rule, "resourceNames");
        let names: Vec<Option<&str>> = if names.is_empty() {
            vec![None]
        } else {
            names.into_iter().map(Some).collect()
        };
        listed(rule, "verbs").iter().all(|verb| {
            listed(rule, "apiGroups").iter().all(|group| {
                listed(rule, "resources").iter().all(|resource| {
                    names.iter().all(|name| {
                        holder.iter().any(|h| {
                            let held_names = listed(h, "resourceNames");
                            matches(&listed(h, "verbs"), verb)
                                && matches(&listed(h, "apiGroups"), group)
                                && matches(&listed(h, "resources"), resource)
                                && (held_names.is_empty()
                                    || name.is_some_and(|n| held_names.contains(&n)))
                        })
                    })
                })
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(method: &str, uri: &str) -> Attributes {
        Attributes::of(method, uri).expect("a namespaced request")
    }

    #[test]
    fn requests_read_as_the_api_server_reads_them() {
        let get = attrs(
            "GET",
            "/apis/frameworkcontroller.microsoft.com/v1/namespaces/ns/frameworks/fw",
        );
        assert_eq!(
            (
                get.verb.as_str(),
                get.group.as_str(),
                get.resource.as_str(),
                get.name.as_deref()
            ),
            (
                "get",
                "frameworkcontroller.microsoft.com",
                "frameworks",
                Some("fw")
            )
        );
        let watch = attrs(
            "GET",
            "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dfw-peers&watch=true",
        );
        assert_eq!(
            (watch.verb.as_str(), watch.name.as_deref()),
            ("watch", Some("fw-peers"))
        );
        let queue = attrs("GET", "/apis/scheduling.volcano.sh/v1beta1/queues/team-a");
        assert_eq!(
            (
                queue.verb.as_str(),
                queue.namespace.as_str(),
                queue.resource.as_str()
            ),
            ("get", "", "queues")
        );
        assert_eq!(queue.name.as_deref(), Some("team-a"));
        let list = attrs("GET", "/api/v1/namespaces/ns/configmaps");
        assert_eq!((list.verb.as_str(), list.name), ("list", None));
        let log = attrs("GET", "/api/v1/namespaces/ns/pods/p/log?container=main");
        assert_eq!(
            (log.verb.as_str(), log.resource.as_str()),
            ("get", "pods/log")
        );
        let create = attrs("POST", "/api/v1/namespaces/ns/secrets");
        assert_eq!((create.verb.as_str(), create.name), ("create", None));
    }

    #[test]
    fn resource_names_narrow_a_rule() {
        let rules = [json!({"apiGroups": [""], "resources": ["configmaps"],
                            "resourceNames": ["fw-peers"], "verbs": ["get", "list", "watch"]})];
        for ok in [
            ("GET", "/api/v1/namespaces/ns/configmaps/fw-peers"),
            (
                "GET",
                "/api/v1/namespaces/ns/configmaps?fieldSelector=metadata.name%3Dfw-peers&watch=true",
            ),
        ] {
            assert!(allows(&rules, &attrs(ok.0, ok.1)), "{ok:?}");
        }
        for refused in [
            ("GET", "/api/v1/namespaces/ns/configmaps/other-peers"),
            ("GET", "/api/v1/namespaces/ns/configmaps?watch=true"),
            ("GET", "/api/v1/namespaces/ns/configmaps"),
            ("PUT", "/api/v1/namespaces/ns/configmaps/fw-peers"),
            ("GET", "/api/v1/namespaces/ns/secrets/fw-peers"),
        ] {
            assert!(!allows(&rules, &attrs(refused.0, refused.1)), "{refused:?}");
        }
    }

    #[test]
    fn a_holder_covers_only_what_it_holds() {
        let holder =
            [json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "watch"]})];
        let narrow = [json!({"apiGroups": [""], "resources": ["configmaps"],
                             "resourceNames": ["x"], "verbs": ["get"]})];
        let more = [json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]})];
        assert!(covers(&holder, &narrow));
        assert!(!covers(&holder, &more));
        assert!(
            !covers(&narrow, &holder),
            "a named grant does not hold every name"
        );
    }
}
