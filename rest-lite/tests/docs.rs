//! The documents' cross-references resolve, so that a reader sent somewhere arrives.
//!
//! Over `README.md`, `BENCHMARKS.md` and `docs/*.md`: every relative link leads to a file
//! that exists, and its `#fragment` to a heading of that file (GitHub's anchors, as
//! `/docs` makes them: [`pai_server::pages::docs::slug`]); every section named in words
//! (`"Name"` after "see", "in" or "under", or followed by "above" or "below"; or after a
//! page's name: `reference.md's "Security"`, `BENCHMARKS.md, "Translation"`) is a heading
//! of the page it names, or of the same page, above or below as it says. And every place
//! in the code and the config that cites a page's section (`BENCHMARKS.md, "…"`, the
//! README's "…", `docs/internals.md, Tests`) names one that is there.

use crate::common;

use std::path::{Path, PathBuf};

/// A page: its file, its text, its headings.
struct Page {
    path: PathBuf,
    text: String,
    headings: Vec<Heading>,
}

struct Heading {
    /// As it reads, without its `#`s and code marks.
    text: String,
    /// Its anchor, as GitHub makes it (a repeated heading's with `-1`, `-2`, …).
    anchor: String,
    /// Its line, from 1.
    line: usize,
}

impl Page {
    fn read(path: PathBuf) -> Self {
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let headings = headings(&text);
        Self {
            path,
            text,
            headings,
        }
    }

    /// The heading `name` names: the one that reads so, or that begins so before a colon
    /// (`"Translation"` names `## Translation: spec text → Framework`).
    fn heading(&self, name: &str) -> Option<&Heading> {
        self.headings.iter().find(|h| {
            h.text == name
                || h.text
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(':'))
        })
    }

    fn has_anchor(&self, anchor: &str) -> bool {
        self.headings.iter().any(|h| h.anchor == anchor)
    }
}

/// The pages a reader goes between.
fn pages(root: &Path) -> Vec<Page> {
    let mut paths = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    paths.extend(guides);
    paths.into_iter().map(Page::read).collect()
}

/// Whether `line` opens or closes a fenced code block.
fn fence(line: &str) -> bool {
    let line = line.trim_start();
    line.starts_with("```") || line.starts_with("~~~")
}

/// The headings of a Markdown text, outside its code blocks.
fn headings(text: &str) -> Vec<Heading> {
    let mut found = Vec::new();
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if fence(line) {
            in_code = !in_code;
            continue;
        }
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if in_code || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let words = line[hashes..].trim().trim_end_matches('#').trim();
        let words = words.replace('`', "").replace("**", "");
        let slug = pai_server::pages::docs::slug(&words);
        let repeats = seen.entry(slug.clone()).or_insert(0);
        let anchor = match *repeats {
            0 => slug,
            n => format!("{slug}-{n}"),
        };
        *repeats += 1;
        found.push(Heading {
            text: words,
            anchor,
            line: n + 1,
        });
    }
    found
}

/// `text` with its code (fenced blocks, inline spans) blanked out, lines and offsets
/// kept; an inline span that is a page's name (`` `BENCHMARKS.md` ``) keeps its words.
fn prose(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_code = false;
    for line in text.split_inclusive('\n') {
        if fence(line) || in_code {
            if fence(line) {
                in_code = !in_code;
            }
            out.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            out.push_str(line);
        }
    }
    let chars: Vec<char> = out.chars().collect();
    let mut result: Vec<char> = chars.clone();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        // The span ends at the next run of as many backticks, within the paragraph.
        let mut j = i + run;
        let mut end = None;
        while j < chars.len() {
            if chars[j] == '\n' && chars.get(j + 1) == Some(&'\n') {
                break;
            }
            if chars[j] == '`' {
                let other = chars[j..].iter().take_while(|c| **c == '`').count();
                if other == run {
                    end = Some(j);
                    break;
                }
                j += other;
                continue;
            }
            j += 1;
        }
        let Some(end) = end else {
            i += run;
            continue;
        };
        let inside: String = chars[i + run..end].iter().collect();
        let keep = page_name(inside.trim()).is_some();
        for (k, c) in result.iter_mut().enumerate().take(end + run).skip(i) {
            let within = k >= i + run && k < end;
            if *c != '\n' && !(keep && within) {
                *c = ' ';
            }
        }
        i = end + run;
    }
    result.into_iter().collect()
}

/// The page a name stands for (`docs/using.md`, `using.md`, `README`, `the README`), as a
/// path from the repository's root.
fn page_name(word: &str) -> Option<&'static str> {
    let word = word.trim_matches(|c: char| c == '[' || c == '(' || c == '`');
    let file = word.rsplit('/').next().unwrap_or(word);
    let file = file.strip_suffix(".md").unwrap_or(file);
    Some(match file {
        "README" => "README.md",
        "BENCHMARKS" => "BENCHMARKS.md",
        "internals" => "docs/internals.md",
        "using" => "docs/using.md",
        "reference" => "docs/reference.md",
        "operating" => "docs/operating.md",
        _ => return None,
    })
}

/// A section named in words: the page it is on (`None`: the citing page), its name,
/// whether it is said to be above or below, and the line it is named on.
#[derive(Debug, PartialEq)]
struct Named {
    page: Option<&'static str>,
    name: String,
    direction: Option<&'static str>,
    line: usize,
}

/// What stands before a quoted name, when it is a page: `using.md's`, `README,`,
/// `[using.md](using.md),`, `` `BENCHMARKS.md`, `` (its backticks blanked).
fn page_before(before: &str) -> Option<&'static str> {
    let before = before.trim_end();
    let before = before
        .strip_suffix(',')
        .or_else(|| before.strip_suffix("'s"))
        .unwrap_or(before)
        .trim_end();
    // A link: its target names the page.
    if let Some(rest) = before.strip_suffix(')')
        && let Some(open) = rest.rfind("](")
    {
        let target = &rest[open + 2..];
        return page_name(target.split('#').next().unwrap_or(target));
    }
    let word = before
        .rsplit(|c: char| c.is_whitespace())
        .next()
        .unwrap_or_default();
    page_name(word)
}

/// Every section `text` names in words. `in_prose`: a page's text, where a section
/// named after "see", "in" or "under", or before "above" or "below", counts; elsewhere
/// (comments) only one after a page's name does.
fn named_sections(text: &str, in_prose: bool) -> Vec<Named> {
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(open) = text[at..].find('"').map(|i| at + i) {
        let Some(close) = text[open + 1..].find('"').map(|i| open + 1 + i) else {
            break;
        };
        let inside = &text[open + 1..close];
        if inside.contains("\n\n") {
            // A quote without its pair in this paragraph: the next one opens.
            at = open + 1;
            continue;
        }
        at = close + 1;
        let name = inside.split_whitespace().collect::<Vec<_>>().join(" ");
        if !name.chars().next().is_some_and(char::is_uppercase) || name.len() > 80 {
            continue;
        }
        let mut start = open.saturating_sub(80);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        let before = &text[start..open];
        let after = text[close + 1..].trim_start();
        let direction = ["above", "below"]
            .into_iter()
            .find(|d| after.starts_with(d) && !after[d.len()..].starts_with(char::is_alphanumeric));
        let word_before = before
            .trim_end()
            .rsplit(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or_default()
            .to_lowercase();
        let page = page_before(before);
        let cited = page.is_some()
            || (in_prose
                && (direction.is_some() || ["see", "in", "under"].contains(&word_before.as_str())));
        if !cited {
            continue;
        }
        found.push(Named {
            page,
            name,
            direction,
            line: text[..open].matches('\n').count() + 1,
        });
    }
    found
}

/// `docs/internals.md, Tests`: a page's section named without quotes, one capitalised
/// word before a closing parenthesis; and `BENCHMARKS.md, #60`, an issue cited where a
/// section should be (never a heading).
fn bare_sections(text: &str) -> Vec<Named> {
    let mut found = Vec::new();
    for (i, _) in text.match_indices(".md,") {
        let rest = text[i + 4..].trim_start();
        let issue = rest.starts_with('#') && rest[1..].starts_with(|c: char| c.is_ascii_digit());
        let word: String = rest
            .chars()
            .skip(usize::from(issue))
            .take_while(|c| c.is_alphanumeric())
            .collect();
        let name = if issue { format!("#{word}") } else { word };
        let capital = name.chars().next().is_some_and(char::is_uppercase);
        if !(issue || capital && rest[name.len()..].starts_with(')')) {
            continue;
        }
        let start = text[..i].rfind([' ', '(', '\n']).map_or(0, |s| s + 1);
        if let Some(page) = page_name(&text[start..i + 3]) {
            found.push(Named {
                page: Some(page),
                name,
                direction: None,
                line: text[..i].matches('\n').count() + 1,
            });
        }
    }
    found
}

/// Where `named` does not resolve, in words; `None` when it does.
fn unresolved(named: &Named, here: &Page, pages: &[Page], root: &Path) -> Option<String> {
    let page = match named.page {
        Some(file) => pages.iter().find(|p| p.path == root.join(file))?,
        None => here,
    };
    let Some(heading) = page.heading(&named.name) else {
        return Some(format!(
            "\"{}\" is no heading of {}",
            named.name,
            page.path.strip_prefix(root).unwrap_or(&page.path).display()
        ));
    };
    let same_page = std::ptr::eq(page, here);
    match named.direction {
        Some("above") if same_page && heading.line > named.line => Some(format!(
            "\"{}\" is below (line {}), not above",
            named.name, heading.line
        )),
        Some("below") if same_page && heading.line < named.line => Some(format!(
            "\"{}\" is above (line {}), not below",
            named.name, heading.line
        )),
        _ => None,
    }
}

/// The links of `pages` that lead nowhere: to no file, or to a fragment that is no
/// heading of the page linked, as `page:line: target: why`.
fn broken_links(pages: &[Page], root: &Path) -> Vec<String> {
    let mut broken = Vec::new();
    for page in pages {
        let prose = prose(&page.text);
        let folder = page.path.parent().expect("a folder");
        let name = page.path.strip_prefix(root).unwrap_or(&page.path).display();
        for (i, _) in prose.match_indices("](") {
            let rest = &prose[i + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].trim();
            if target.is_empty()
                || target.contains("://")
                || target.starts_with("mailto:")
                || target.contains(' ')
            {
                continue;
            }
            let line = prose[..i].matches('\n').count() + 1;
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let linked = if file.is_empty() {
                page.path.clone()
            } else {
                folder.join(file)
            };
            let Ok(linked) = std::fs::canonicalize(&linked) else {
                broken.push(format!("{name}:{line}: {target}: no such file"));
                continue;
            };
            if fragment.is_empty() {
                continue;
            }
            let target_page = pages
                .iter()
                .find(|p| std::fs::canonicalize(&p.path).ok().as_ref() == Some(&linked));
            match target_page {
                Some(p) if p.has_anchor(fragment) => {}
                Some(_) => broken.push(format!("{name}:{line}: {target}: no such heading")),
                None => broken.push(format!(
                    "{name}:{line}: {target}: a fragment of a file that is not a page"
                )),
            }
        }
    }
    broken
}

#[test]
fn every_link_leads_to_a_file_and_a_heading_that_are_there() {
    let root = common::repo_root();
    let broken = broken_links(&pages(&root), &root);
    assert!(broken.is_empty(), "links that lead nowhere: {broken:#?}");
}

#[test]
fn a_link_to_no_file_or_no_heading_is_found() {
    let dir = pai_test_support::scratch::scratch("docs-links");
    std::fs::create_dir(dir.path().join("docs")).expect("docs/");
    std::fs::write(dir.path().join("config.yaml"), "").expect("a file");
    std::fs::write(
        dir.path().join("docs/a.md"),
        "# A\n\n## Removing it\n\nSee [up](#a), [the steps](#removing-it), [gone](#gone),\n\
         [b](b.md#the-end), [b's start](b.md#start), [none](none.md), [a file](../config.yaml),\n\
         `[not a link](nowhere.md)`, [the web](https://example.com/#x).\n",
    )
    .expect("a page");
    std::fs::write(dir.path().join("docs/b.md"), "# B\n\n## The end\n").expect("a page");
    let pages: Vec<Page> = ["docs/a.md", "docs/b.md"]
        .iter()
        .map(|p| Page::read(dir.path().join(p)))
        .collect();
    assert_eq!(
        broken_links(&pages, dir.path()),
        [
            "docs/a.md:5: #gone: no such heading",
            "docs/a.md:6: b.md#start: no such heading",
            "docs/a.md:6: none.md: no such file",
        ]
    );
}

#[test]
fn every_section_a_page_names_is_a_heading_where_it_says() {
    let root = common::repo_root();
    let pages = pages(&root);
    let mut broken = Vec::new();
    for page in &pages {
        let name = page
            .path
            .strip_prefix(&root)
            .unwrap_or(&page.path)
            .display();
        for named in named_sections(&prose(&page.text), true) {
            if let Some(why) = unresolved(&named, page, &pages, &root) {
                broken.push(format!("{name}:{}: {why}", named.line));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "sections named that are not there: {broken:#?}"
    );
}

/// The files of the repository whose comments may cite a page, its own and its tests'
/// (this file's examples aside).
fn cited_from(dir: &Path, root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            let skipped = ["target", "node_modules", "fixtures", "snapshots", "results"];
            if (!name.starts_with('.') || name == ".ci") && !skipped.contains(&name.as_ref()) {
                cited_from(&path, root, out);
            }
            continue;
        }
        let text_kind = [".rs", ".toml", ".yaml", ".yml", ".sh", ".py", ".js", ".hbs"]
            .iter()
            .any(|e| name.ends_with(e))
            || name == "Dockerfile"
            || dir.file_name().is_some_and(|d| d == ".ci");
        let this_test = path == root.join("rest-lite/tests/docs.rs");
        if text_kind && !this_test && !name.ends_with(".lock") {
            out.push(path);
        }
    }
}

/// The comments of `text`, their marks (`//!`, `///`, `//`, `#`, `*`) taken off, so a
/// citation that runs from one comment line to the next reads as one; every other line
/// empty, so that lines keep their numbers.
fn comments(text: &str) -> String {
    text.lines()
        .map(|line| {
            let line = line.trim_start();
            ["//!", "///", "//", "#", "*"]
                .iter()
                .find_map(|mark| line.strip_prefix(mark))
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_section_the_code_cites_is_there() {
    let root = common::repo_root();
    let pages = pages(&root);
    let mut files = Vec::new();
    cited_from(&root, &root, &mut files);
    files.sort();
    let mut broken = Vec::new();
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let text = comments(&text);
        let name = file.strip_prefix(&root).unwrap_or(file).display();
        let mut named = named_sections(&text, false);
        named.extend(bare_sections(&text));
        for named in named {
            // Code cites other pages only; a quoted name with no page is no citation.
            if named.page.is_none() {
                continue;
            }
            let page = pages
                .iter()
                .find(|p| Some(p.path.as_path()) == named.page.map(|f| root.join(f)).as_deref())
                .expect("a page");
            if let Some(why) = unresolved(&named, page, &pages, &root) {
                broken.push(format!("{name}:{}: {why}", named.line));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "sections the code and config cite that are not there: {broken:#?}"
    );
}

#[test]
fn sections_named_in_words_are_found_and_quotations_left_alone() {
    let text = "Intro, see \"Security\"; in [using.md](using.md), \"The portal\" and\n\
                under `reference.md`'s \"The REST\n API\"; \"Removing it\" below; a message\n\
                \"waits for job prep\" as said; BENCHMARKS.md, \"Translation\".\n";
    let found = named_sections(&prose(text), true);
    let pages_names: Vec<(Option<&str>, &str, Option<&str>, usize)> = found
        .iter()
        .map(|n| (n.page, n.name.as_str(), n.direction, n.line))
        .collect();
    assert_eq!(
        pages_names,
        [
            (None, "Security", None, 1),
            (Some("docs/using.md"), "The portal", None, 1),
            (Some("docs/reference.md"), "The REST API", None, 2),
            (None, "Removing it", Some("below"), 3),
            (Some("BENCHMARKS.md"), "Translation", None, 4),
        ]
    );
    let code = comments(
        "//! memory (BENCHMARKS.md,\n//! \"A long-running server's memory\").\n\
         # needs the README's \"Security\" and (docs/internals.md, Tests) here\n\
         // held 25 (BENCHMARKS.md,\n// #60). Made here\n\
         let s = include_str!(\"../docs/using.md\"); \"Not cited\"\n",
    );
    let mut cited = named_sections(&code, false);
    cited.extend(bare_sections(&code));
    let cited: Vec<(Option<&str>, &str)> =
        cited.iter().map(|n| (n.page, n.name.as_str())).collect();
    assert_eq!(
        cited,
        [
            (Some("BENCHMARKS.md"), "A long-running server's memory"),
            (Some("README.md"), "Security"),
            (Some("docs/internals.md"), "Tests"),
            (Some("BENCHMARKS.md"), "#60"),
        ]
    );
}

#[test]
fn headings_get_githubs_anchors() {
    let text = "# Title\n\n## 1. Build and push the images\n\n```sh\n# not a heading\n```\n\n\
                ## `rest-lite serve`: the server\n\n## Tests\n\n### Tests\n";
    let anchors: Vec<String> = headings(text).into_iter().map(|h| h.anchor).collect();
    assert_eq!(
        anchors,
        [
            "title",
            "1-build-and-push-the-images",
            "rest-lite-serve-the-server",
            "tests",
            "tests-1"
        ]
    );
}
