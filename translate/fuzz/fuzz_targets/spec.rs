//! parse → validate → transform over arbitrary bytes: nothing may panic, every
//! Framework that comes out keeps the port invariants, and it survives JSON and YAML.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use pai_translate::config::ClusterConfig;
use pai_translate::ports::Seed;
use pai_translate::spec::{JobSpec, SpecFormat, UserName};
use pai_translate::transform::{Submission, Transformer};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let format = SpecFormat::detect(text);
    let Ok(spec) = JobSpec::parse(text, format) else { return };
    let user = UserName::parse("fuzz").expect("valid user");
    let transformer = Transformer::new(ClusterConfig::default());
    let submission = Submission { user: &user, spec: &spec, spec_text: text, format };
    let Ok(framework) = transformer.transform(submission, Seed::Fixed(data.len() as u64)) else {
        return;
    };
    for role in &framework.spec.task_roles {
        let pod = role.task.pod.spec.as_ref().expect("pod spec");
        let ports = pod.containers[0].ports.as_ref().expect("ports");
        let mut seen = HashSet::new();
        for p in ports {
            assert!(p.container_port >= 1024, "port below 1024");
            assert!(seen.insert(p.container_port), "duplicate port in a pod");
        }
    }
    let json = serde_json::to_string(&framework).expect("serialises");
    let reread: pai_contract::Framework = serde_json::from_str(&json).expect("JSON reads back");
    assert!(reread == framework, "JSON round trip changed the Framework");
    // `rest-lite transform` prints YAML by default: the manifest must mean the same.
    let yaml = serde_saphyr::to_string(&framework).expect("renders YAML");
    let reread: pai_contract::Framework = serde_saphyr::from_str(&yaml).expect("YAML reads back");
    assert!(reread == framework, "YAML round trip changed the Framework");
});
