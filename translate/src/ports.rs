//! Port allocation: every role gets a [`PortPlan`] in which every port is distinct and
//! ≥ 1024. Requests with `beginAt` get exactly their ports; the others are drawn
//! uniformly from the configured range, avoiding every port of the job when the range
//! allows it (so pods of different roles can share a host under host networking) and at
//! least every port of their own pod. Draws are deterministic for a given seed.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};

use serde::{Deserialize, Serialize};

use pai_contract::PortPlan;

use crate::spec::{FieldPath, JobSpec, PortStart, SpecErrors};

/// An inclusive range of ports, `begin ≥ 1024`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortRange {
    pub begin: u16,
    pub end: u16,
}

impl Default for PortRange {
    /// Below the Linux ephemeral range (32768–60999) and Kubernetes' NodePort range
    /// (30000–32767), so host-network tasks do not meet the node's own sockets.
    fn default() -> Self {
        Self {
            begin: 20000,
            end: 29999,
        }
    }
}

impl PortRange {
    pub fn check(&self) -> Result<(), String> {
        if self.begin < 1024 {
            return Err(format!("begin must be at least 1024, got {}", self.begin));
        }
        if self.begin > self.end {
            return Err(format!("begin {} is after end {}", self.begin, self.end));
        }
        Ok(())
    }

    fn len(&self) -> u32 {
        u32::from(self.end) - u32::from(self.begin) + 1
    }

    /// How many ports of the range `taken` leaves.
    fn free(&self, taken: &BTreeSet<u16>) -> u32 {
        self.len() - taken.range(self.begin..=self.end).count() as u32
    }

    /// The `n`-th (from 0) port of the range not in `taken`; `n < self.free(taken)`.
    fn nth_free(&self, n: u32, taken: &BTreeSet<u16>) -> u16 {
        let mut candidate = u32::from(self.begin) + n;
        for &used in taken.range(self.begin..=self.end) {
            if u32::from(used) <= candidate {
                candidate += 1;
            } else {
                break;
            }
        }
        candidate as u16
    }
}

/// Where random draws come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seed {
    /// The same ports for the same spec, every time (tests, reproducible manifests).
    Fixed(u64),
    /// Different ports each time.
    Random,
}

/// SplitMix64: tiny, fast, and its output for a seed never changes between versions.
struct SplitMix64(u64);

impl SplitMix64 {
    fn new(seed: Seed) -> Self {
        match seed {
            Seed::Fixed(s) => Self(s),
            Seed::Random => {
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_u128(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos())
                        .unwrap_or_default(),
                );
                Self(h.finish())
            }
        }
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (`bound > 0`), by widening multiplication.
    fn below(&mut self, bound: u32) -> u32 {
        (((self.next() >> 32) * u64::from(bound)) >> 32) as u32
    }
}

/// One [`PortPlan`] per role of `spec`, in role order.
pub fn allocate(spec: &JobSpec, range: PortRange, seed: Seed) -> Result<Vec<PortPlan>, SpecErrors> {
    let mut rng = SplitMix64::new(seed);
    let explicit: Vec<BTreeSet<u16>> = spec
        .roles()
        .iter()
        .map(|role| {
            role.ports()
                .iter()
                .filter_map(|r| match r.start {
                    PortStart::At(first) => Some((0..r.count).map(move |k| first + k)),
                    PortStart::Any => None,
                })
                .flatten()
                .collect()
        })
        .collect();
    let mut job_taken: BTreeSet<u16> = explicit.iter().flatten().copied().collect();

    let mut plans = Vec::with_capacity(spec.roles().len());
    for (i, (role, mut pod_taken)) in spec.roles().iter().zip(explicit).enumerate() {
        let mut plan = PortPlan::default();
        for request in role.ports() {
            let ports: Vec<u16> = match request.start {
                PortStart::At(first) => (0..request.count).map(|k| first + k).collect(),
                PortStart::Any => {
                    let count = u32::from(request.count);
                    let avoid_job = range.free(&job_taken) >= count;
                    if !avoid_job && range.free(&pod_taken) < count {
                        return Err(SpecErrors::single(
                            &FieldPath::root()
                                .field("taskRoles")
                                .index(i)
                                .field("portList"),
                            format!(
                                "role {:?} needs {count} port(s) for label {:?} but only {} are free in the range {}–{}",
                                role.name().as_str(),
                                request.label.as_str(),
                                range.free(&pod_taken),
                                range.begin,
                                range.end
                            ),
                        ));
                    }
                    let mut drawn = Vec::with_capacity(request.count.into());
                    for _ in 0..count {
                        let taken = if avoid_job { &job_taken } else { &pod_taken };
                        let port = range.nth_free(rng.below(range.free(taken)), taken);
                        pod_taken.insert(port);
                        job_taken.insert(port);
                        drawn.push(port);
                    }
                    drawn
                }
            };
            plan.push(request.label.as_str(), ports).map_err(|e| {
                SpecErrors::single(
                    &FieldPath::root().field("taskRoles").index(i),
                    e.to_string(),
                )
            })?;
        }
        plans.push(plan);
    }
    Ok(plans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nth_free_skips_taken_ports() {
        let range = PortRange {
            begin: 2000,
            end: 2009,
        };
        let taken: BTreeSet<u16> = [2000, 2002, 2003].into_iter().collect();
        let free: Vec<u16> = (0..range.free(&taken))
            .map(|n| range.nth_free(n, &taken))
            .collect();
        assert_eq!(free, vec![2001, 2004, 2005, 2006, 2007, 2008, 2009]);
    }

    #[test]
    fn below_stays_below() {
        let mut rng = SplitMix64::new(Seed::Fixed(7));
        for bound in [1, 2, 3, 1000, u32::MAX] {
            for _ in 0..100 {
                assert!(rng.below(bound) < bound);
            }
        }
    }
}
