//! Where an object lives ([`Key`]: its resource, namespace and name), and which object or
//! collection a request's path names.

use std::collections::HashMap;

/// A request's path parameters (`resource`, `ns`, `name`, …) or its query.
pub(super) type Params = HashMap<String, String>;

/// Where an object lives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// `frameworks`, `pods`, …
    pub resource: String,
    pub namespace: String,
    pub name: String,
}

impl Key {
    pub fn new(resource: &str, namespace: &str, name: &str) -> Self {
        Self {
            resource: resource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

/// The resource and namespace of a collection's path.
pub(super) fn collection_key(params: &Params) -> (String, String) {
    (
        params.get("resource").cloned().unwrap_or_default(),
        params.get("ns").cloned().unwrap_or_default(),
    )
}

/// The object an item's path names.
pub(super) fn item_key(params: &Params) -> Key {
    let (resource, namespace) = collection_key(params);
    Key {
        resource,
        namespace,
        name: params.get("name").cloned().unwrap_or_default(),
    }
}
