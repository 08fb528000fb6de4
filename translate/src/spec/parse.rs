//! A spec's text in, a [`JobSpec`] out: the text read once, then by the front door its
//! document says (protocol v2 says so at its top; a v1 job config has no such field).

use super::error::{FieldPath, SpecErrors};
use super::{JobSpec, MAX_SPEC_BYTES, SpecFormat, reader, v2, validate};

impl JobSpec {
    /// Parses and validates `text`. Fails with every broken rule.
    pub fn parse(text: &str, format: SpecFormat) -> Result<Self, SpecErrors> {
        if text.len() > MAX_SPEC_BYTES {
            return Err(SpecErrors::single(
                &FieldPath::root(),
                format!(
                    "the spec is {} bytes; at most {MAX_SPEC_BYTES} fit in the Framework's annotations",
                    text.len()
                ),
            ));
        }
        let document = reader::document(text, format)?;
        if document.value.get("protocolVersion").is_some() {
            return v2::job(&document.value, &document.role_order);
        }
        validate::job(&document.value)
    }
}
