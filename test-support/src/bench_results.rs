//! What a benchmark measured, kept as a file of raw results:
//! `benchmarks/results/<YYYY-MM-DD>-<machine>/<bench>[-<variant>].json`.
//!
//! Each bench prints its tables for the person who runs it and records the same figures
//! in a [`Run`], with what they were measured on: the date (UTC), the commit (and whether
//! the tree had changes), `rustc -V`, the kernel, the machine, and the command that
//! reproduces the run (`cargo bench -p … --bench …` with the variables that chose what it
//! measured). A row is one figure: the build measured (`this` for the commit's own),
//! the case, the metric, the value and its unit. A figure measured several times (rounds,
//! runs) is several rows.
//!
//! The file is written only when the bench runs as a benchmark (its arguments hold
//! `--bench`, which `cargo bench` passes), never in the quick run `cargo test` makes of
//! it. It goes under the repository's `benchmarks/results/`, or `BENCH_RESULTS_DIR`.
//! The machine is named by a slug of `/proc/cpuinfo` and `/proc/meminfo`
//! (`amd-epyc-2c-24g-vm`: the processor's maker and family, its CPUs, its memory rounded
//! up to GiB, `-vm` under a hypervisor); `BENCH_MACHINE` names it instead where two
//! machines would share a slug. A second run of a bench on the same day and machine
//! is written beside the first (`-2`, `-3`, …), never over it.
//!
//! `BENCHMARKS.md`'s tables are made from the newest of these files
//! ([`crate::bench_page`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

/// The build a bench measured when it ran the commit's own code.
pub const THIS: &str = "this";

/// The value at fraction `p` (0 to 1) of `sorted` (ascending, not empty): the nearest
/// rank, `(len - 1) × p` rounded, so `0.5` is the median and `1.0` the largest.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    // The rank is within 0..len for p in 0..=1; a cast of a float saturates.
    let rank = ((sorted.len() - 1) as f64 * p.clamp(0.0, 1.0)).round() as usize;
    sorted[rank]
}

/// One figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The build measured: [`THIS`], or what the bench was told to run instead.
    pub build: String,
    pub case: String,
    pub metric: String,
    pub value: f64,
    /// `µs`, `ms`, `s`, `B`, `KiB`, `MiB`, `kB`, `MB`, `/s`, `×`, or empty for a count.
    pub unit: String,
}

/// The figures of one run of a bench, written at its end by [`Run::write`].
#[derive(Debug)]
pub struct Run {
    package: String,
    bench: String,
    variant: Option<String>,
    recording: bool,
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Run {
    /// A run of `cargo bench -p <package> --bench <bench>`; it records only when this
    /// process was started with `--bench`.
    pub fn new(package: &str, bench: &str) -> Self {
        Self {
            package: package.to_string(),
            bench: bench.to_string(),
            variant: None,
            recording: std::env::args().any(|a| a == "--bench"),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// What this run measured of several things the bench can measure (`1000tasks`): it
    /// names the file, and the page's tables ask for it.
    pub fn variant(mut self, variant: impl Into<String>) -> Self {
        self.variant = Some(variant.into()).filter(|v| !v.is_empty());
        self
    }

    /// Whether the run will be written (it runs as a benchmark).
    pub fn recording(&self) -> bool {
        self.recording
    }

    /// A figure of this commit's build.
    pub fn record(&mut self, case: &str, metric: &str, value: f64, unit: &str) {
        self.record_build(THIS, case, metric, value, unit);
    }

    /// A figure of `build`. A value that is not finite (a ratio to nothing) is left out.
    pub fn record_build(&mut self, build: &str, case: &str, metric: &str, value: f64, unit: &str) {
        if !value.is_finite() {
            return;
        }
        self.rows.push(Row {
            build: build.to_string(),
            case: case.to_string(),
            metric: metric.to_string(),
            // What the bench measured, without the last bits of a binary fraction.
            value: (value * 1e4).round() / 1e4,
            unit: unit.to_string(),
        });
    }

    /// A line a reader of the figures needs (which shell the floor ran, what was skipped).
    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// The figures so far.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// Writes the run's file, when it records and has figures, and says where on
    /// stderr; `None` when nothing was written (a failure to write is said, not fatal: the
    /// bench's own output is still there).
    pub fn write(&self) -> Option<PathBuf> {
        if !self.recording || self.rows.is_empty() {
            return None;
        }
        let root = results_dir();
        let recorded = now();
        let dir = root.join(format!("{}-{}", &recorded[..10], machine()));
        let stem = match &self.variant {
            Some(v) => format!("{}-{v}", self.bench),
            None => self.bench.clone(),
        };
        let path = (1..)
            .map(|n| match n {
                1 => dir.join(format!("{stem}.json")),
                n => dir.join(format!("{stem}-{n}.json")),
            })
            .find(|p| !p.exists())
            .expect("a free name");
        let (commit, dirty) = commit();
        let text = to_json(
            &Header {
                bench: &self.bench,
                variant: self.variant.as_deref(),
                recorded: &recorded,
                commit: &commit,
                dirty,
                machine: &machine(),
                cpu: cpu_model().as_deref(),
                rustc: rustc().as_deref(),
                kernel: kernel().as_deref(),
                command: &self.command(),
                args: &std::env::args().skip(1).collect::<Vec<_>>(),
                notes: &self.notes,
                source: None,
            },
            &self.rows,
        );
        match std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, text)) {
            Ok(()) => {
                eprintln!("results: {}", path.display());
                Some(path)
            }
            Err(e) => {
                eprintln!("results: cannot write {}: {e}", path.display());
                None
            }
        }
    }

    /// The command that runs this bench again as it ran: the variables that chose what it
    /// measured, then `cargo bench`.
    pub fn command(&self) -> String {
        let mut vars: Vec<(String, String)> =
            std::env::vars().filter(|(name, _)| chooses(name)).collect();
        vars.sort();
        let mut words: Vec<String> = vars
            .into_iter()
            .map(|(name, value)| format!("{name}={}", quoted(&value)))
            .collect();
        words.push(format!(
            "cargo bench -p {} --bench {}",
            self.package, self.bench
        ));
        words.join(" ")
    }
}

/// Whether the variable `name` chooses what a bench measures (and so belongs in its
/// command). Where results go and what the machine is called do not; nor does any
/// variable that could hold a secret.
fn chooses(name: &str) -> bool {
    const PREFIXES: &[&str] = &["BENCH_", "STORE_", "HISTORY_", "SOAK_", "RETIRE_"];
    const NAMES: &[&str] = &[
        "K8S_HARNESS",
        "REST_LITE_STATIC_RUNTIME",
        "REST_LITE_MAX_TASKS",
        "REST_LITE_PORT_RANGE",
        "REST_LITE_ENGINE",
        "REST_LITE_ENGINE_RUNTIME",
        "TOKIO_WORKER_THREADS",
        "GLIBC_TUNABLES",
        "MALLOC_ARENA_MAX",
    ];
    let not = ["BENCH_RESULTS_DIR", "BENCH_MACHINE"];
    !not.contains(&name) && (PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name))
}

/// `value` as a shell word.
fn quoted(value: &str) -> String {
    let plain = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.,:/=+-@%".contains(c));
    if plain {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

/// The repository's root (this crate's parent folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate's parent")
        .to_path_buf()
}

/// Where results are written and read: `BENCH_RESULTS_DIR`, or the repository's
/// `benchmarks/results/`.
pub fn results_dir() -> PathBuf {
    std::env::var_os("BENCH_RESULTS_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("benchmarks/results"))
}

/// Now, in UTC, to the second (`2026-11-29T00:52:30Z`).
fn now() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string()
}

/// The machine's name: `BENCH_MACHINE`, or its slug ([`machine_slug`]).
pub fn machine() -> String {
    match std::env::var("BENCH_MACHINE") {
        Ok(name) if !name.trim().is_empty() => slug(&name),
        _ => machine_slug(
            &std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default(),
            &std::fs::read_to_string("/proc/meminfo").unwrap_or_default(),
        ),
    }
}

/// `amd-epyc-2c-24g-vm` from `/proc/cpuinfo` and `/proc/meminfo`: the processor's maker
/// and family (its model's first two words, trademarks left out), its CPUs, its memory
/// in GiB rounded up, and `-vm` where the CPU says it runs under a hypervisor.
pub fn machine_slug(cpuinfo: &str, meminfo: &str) -> String {
    let field = |name: &str| {
        cpuinfo.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim().to_string())
        })
    };
    let model = field("model name").unwrap_or_else(|| "unknown".to_string());
    let family: Vec<String> = model
        .replace("(R)", " ")
        .replace("(TM)", " ")
        .replace("(tm)", " ")
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .filter(|w| !matches!(w.as_str(), "cpu" | "processor"))
        .take(2)
        .collect();
    let cpus = cpuinfo
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count()
        .max(1);
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let gib = kib.div_ceil(1024 * 1024);
    let vm = field("flags").is_some_and(|f| f.split_whitespace().any(|f| f == "hypervisor"));
    slug(&format!(
        "{}-{cpus}c-{gib}g{}",
        family.join("-"),
        if vm { "-vm" } else { "" }
    ))
}

/// Lower-case letters, digits and single dashes.
fn slug(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_end_matches('-').to_string()
}

fn cpu_model() -> Option<String> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

fn rustc() -> Option<String> {
    let out = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .arg("-V")
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn kernel() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .ok()
        .map(|k| format!("Linux {}", k.trim()))
}

/// The short commit of the repository's `HEAD`, and whether tracked files differ from it.
fn commit() -> (String, bool) {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("--no-optional-locks")
            .arg("-C")
            .arg(repo_root())
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    (commit, dirty)
}

/// What a results file says of its run, beside its rows.
#[derive(Debug)]
pub struct Header<'a> {
    pub bench: &'a str,
    pub variant: Option<&'a str>,
    pub recorded: &'a str,
    pub commit: &'a str,
    pub dirty: bool,
    pub machine: &'a str,
    pub cpu: Option<&'a str>,
    pub rustc: Option<&'a str>,
    pub kernel: Option<&'a str>,
    pub command: &'a str,
    pub args: &'a [String],
    pub notes: &'a [String],
    /// Where figures not measured by this code came from (a page they were copied from).
    pub source: Option<&'a str>,
}

/// A results file's text: its header's fields, then one row a line.
pub fn to_json(header: &Header<'_>, rows: &[Row]) -> String {
    let mut fields = vec![
        ("bench", json!(header.bench)),
        ("variant", json!(header.variant)),
        ("recorded", json!(header.recorded)),
        ("commit", json!(header.commit)),
        ("dirty", json!(header.dirty)),
        ("machine", json!(header.machine)),
        ("cpu", json!(header.cpu)),
        ("rustc", json!(header.rustc)),
        ("kernel", json!(header.kernel)),
        ("command", json!(header.command)),
        ("args", json!(header.args)),
        ("notes", json!(header.notes)),
    ];
    if let Some(source) = header.source {
        fields.push(("source", json!(source)));
    }
    let mut text = String::from("{\n");
    for (name, value) in fields {
        text.push_str(&format!("  {}: {value},\n", json!(name)));
    }
    text.push_str("  \"rows\": [\n");
    for (i, row) in rows.iter().enumerate() {
        let line = json!({
            "build": row.build, "case": row.case, "metric": row.metric,
            "value": row.value, "unit": row.unit,
        });
        let comma = if i + 1 < rows.len() { "," } else { "" };
        text.push_str(&format!("    {line}{comma}\n"));
    }
    text.push_str("  ]\n}\n");
    text
}

/// A results file as read back.
#[derive(Clone, Debug)]
pub struct Results {
    /// Its path below the results folder (`2026-11-29-amd-epyc-2c-24g-vm/local-1000tasks.json`).
    pub path: String,
    pub bench: String,
    pub variant: Option<String>,
    pub recorded: String,
    pub commit: String,
    pub dirty: bool,
    pub machine: String,
    pub command: String,
    pub notes: Vec<String>,
    pub source: Option<String>,
    pub rows: Vec<Row>,
}

impl Results {
    /// The file's `text`, found at `path` (below the results folder).
    pub fn parse(path: &str, text: &str) -> Result<Self, String> {
        let fail = |what: &str| format!("{path}: {what}");
        let value: Value = serde_json::from_str(text).map_err(|e| fail(&e.to_string()))?;
        let string = |name: &str| {
            value[name]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| fail(&format!("no `{name}`")))
        };
        let rows = value["rows"]
            .as_array()
            .ok_or_else(|| fail("no `rows`"))?
            .iter()
            .map(|row| {
                let text = |name: &str| {
                    row[name]
                        .as_str()
                        .map(str::to_string)
                        .ok_or_else(|| fail(&format!("a row without `{name}`: {row}")))
                };
                Ok(Row {
                    build: text("build")?,
                    case: text("case")?,
                    metric: text("metric")?,
                    value: row["value"]
                        .as_f64()
                        .ok_or_else(|| fail(&format!("a row without a number: {row}")))?,
                    unit: text("unit")?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let results = Self {
            path: path.to_string(),
            bench: string("bench")?,
            variant: value["variant"].as_str().map(str::to_string),
            recorded: string("recorded")?,
            commit: string("commit")?,
            dirty: value["dirty"].as_bool().unwrap_or(false),
            machine: string("machine")?,
            command: string("command")?,
            notes: value["notes"]
                .as_array()
                .map(|n| {
                    n.iter()
                        .filter_map(|n| n.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
            source: value["source"].as_str().map(str::to_string),
            rows,
        };
        let folder = format!(
            "{}-{}/",
            results.recorded.get(..10).unwrap_or(""),
            results.machine
        );
        if !path.starts_with(&folder) {
            return Err(fail(&format!(
                "recorded {} on {} belongs in {folder}",
                results.recorded, results.machine
            )));
        }
        Ok(results)
    }

    /// The values of `build`'s figure `metric` of `case`, in the order measured.
    pub fn values_of(&self, build: &str, case: &str, metric: &str) -> Vec<(f64, &str)> {
        self.rows
            .iter()
            .filter(|r| r.build == build && r.case == case && r.metric == metric)
            .map(|r| (r.value, r.unit.as_str()))
            .collect()
    }

    /// Whether this commit's build has the figure `metric` of `case`.
    pub fn has(&self, case: &str, metric: &str) -> bool {
        !self.values_of(THIS, case, metric).is_empty()
    }
}

/// Every results file below `dir` (`<date>-<machine>/<name>.json`), in path order.
pub fn read_all(dir: &Path) -> Result<Vec<Results>, Vec<String>> {
    let mut found = Vec::new();
    let mut problems = Vec::new();
    let folders = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return Err(vec![format!("cannot read {}: {e}", dir.display())]),
    };
    for folder in folders.flatten() {
        if !folder.path().is_dir() {
            continue;
        }
        for file in std::fs::read_dir(folder.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = file.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let name = format!(
                "{}/{}",
                folder.file_name().to_string_lossy(),
                file.file_name().to_string_lossy()
            );
            match std::fs::read_to_string(&path) {
                Ok(text) => match Results::parse(&name, &text) {
                    Ok(r) => found.push(r),
                    Err(e) => problems.push(e),
                },
                Err(e) => problems.push(format!("{name}: {e}")),
            }
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_is_named_by_its_processor_cpus_memory_and_hypervisor() {
        let meminfo = "MemTotal:       24684084 kB\nMemFree: 1 kB\n";
        let amd = "processor\t: 0\nmodel name\t: AMD EPYC 7B13 64-Core Processor\nflags\t\t: fpu hypervisor\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13 64-Core Processor\nflags\t\t: fpu hypervisor\n";
        assert_eq!(machine_slug(amd, meminfo), "amd-epyc-2c-24g-vm");
        let intel =
            "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu sse\n";
        assert_eq!(
            machine_slug(intel, "MemTotal: 16384000 kB\n"),
            "intel-xeon-1c-16g"
        );
        assert_eq!(slug("My  GPU box!"), "my-gpu-box");
    }

    #[test]
    fn a_file_reads_back_as_it_was_written() {
        let rows = vec![Row {
            build: THIS.into(),
            case: "64-task job".into(),
            metric: "submit → every user command running".into(),
            value: 1031.0,
            unit: "ms".into(),
        }];
        let header = Header {
            bench: "local",
            variant: Some("64tasks"),
            recorded: "2026-11-27T23:08:02Z",
            commit: "f448836",
            dirty: false,
            machine: "amd-epyc-2c-24g-vm",
            cpu: None,
            rustc: None,
            kernel: None,
            command: "BENCH_TASKS=64 cargo bench -p rest-lite --bench local",
            args: &[],
            notes: &["the floor ran bash".to_string()],
            source: Some("by hand"),
        };
        let text = to_json(&header, &rows);
        let read = Results::parse("2026-11-27-amd-epyc-2c-24g-vm/local-64tasks.json", &text)
            .expect("parses");
        assert_eq!(read.rows, rows);
        assert_eq!(read.variant.as_deref(), Some("64tasks"));
        assert_eq!(read.notes, ["the floor ran bash"]);
        assert_eq!(read.source.as_deref(), Some("by hand"));
        assert!(read.has("64-task job", "submit → every user command running"));
        // A file in another date's or machine's folder is refused.
        assert!(Results::parse("2026-11-28-amd-epyc-2c-24g-vm/local.json", &text).is_err());
    }

    #[test]
    fn the_command_names_what_chose_the_measure_and_no_secret() {
        assert!(chooses("BENCH_TASKS"));
        assert!(chooses("HISTORY_JOBS"));
        assert!(!chooses("BENCH_RESULTS_DIR"));
        assert!(!chooses("REST_LITE_TOKEN"));
        assert_eq!(quoted("1000"), "1000");
        assert_eq!(quoted("job GET,list"), "'job GET,list'");
        assert_eq!(quoted("it's"), r"'it'\''s'");
    }
}
