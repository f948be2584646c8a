//! The documentation against the tree: every performance figure sits under the command that
//! produces it, each such command exists here, and the instruction-count script runs the
//! server with the flags it is given; every quick start shown is the code of a file that a
//! test runs, and every client language has one; every relative link and anchor between the
//! pages, and every runbook URL of the alerts, leads to a page and a heading that exist.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The page of performance figures: `docs/performance.md`, one `# Performance` heading, and
/// under it one `## ` part per command.
const PERFORMANCE: &str = "docs/performance.md";

/// The performance page, after checking that its only top-level heading is `# Performance`
/// (so no part can sit outside the section the checks below read).
fn performance_section() -> String {
    let page = std::fs::read_to_string(Path::new(ROOT).join(PERFORMANCE)).unwrap();
    assert!(page.starts_with("# Performance\n"), "{PERFORMANCE} does not open with `# Performance`");
    let tops: Vec<&str> =
        outside_code(&page).into_iter().map(|(_, line)| line).filter(|line| line.starts_with("# ")).collect();
    assert_eq!(tops, ["# Performance"], "{PERFORMANCE} has other top-level headings");
    page
}

/// Whether `command` (as a heading names it) can be run from this tree.
fn runnable(command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.as_slice() {
        ["cargo", "bench", "--bench", name, ..] => Path::new(ROOT).join(format!("benches/{name}.rs")).exists(),
        [script, ..] if script.starts_with("scripts/") => {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(Path::new(ROOT).join(script)).is_ok_and(|m| m.permissions().mode() & 0o111 != 0)
        }
        _ => false,
    }
}

/// Every part of the performance section that holds figures is headed by the command that
/// produces them, and that command runs from this tree: the section is what anyone can
/// reproduce, and the history of earlier builds lives in CHANGELOG.md.
#[test]
fn every_performance_figure_sits_under_the_command_that_produces_it() {
    let section = performance_section();
    let mut parts = section.split("\n## ");
    let intro = parts.next().unwrap();
    // The intro says how to read the figures; it holds none itself.
    for line in intro.lines().skip(1) {
        assert!(
            !line.split(|c: char| !c.is_ascii_alphanumeric()).any(|word| word.len() > 1 && word.parse::<u64>().is_ok()),
            "a figure outside any command's part: {line:?}"
        );
    }
    let mut commands = Vec::new();
    for part in parts {
        let heading = part.lines().next().unwrap();
        let command = heading
            .split('`')
            .nth(1)
            .unwrap_or_else(|| panic!("the heading {heading:?} names no command in backticks"));
        assert!(runnable(command), "{command:?} (in {heading:?}) is not a command of this tree");
        commands.push(command.to_string());
    }
    for expected in
        ["scripts/measure/bench.sh", "scripts/measure/count-instructions.sh", "cargo bench --bench generator"]
    {
        assert!(commands.iter().any(|c| c.starts_with(expected)), "no part for {expected}: {commands:?}");
    }
    assert!(Path::new(ROOT).join("CHANGELOG.md").exists(), "the history has nowhere to go");
}

/// The instruction count runs the server on one worker thread unless told another count;
/// `serve` takes each flag once, so a second `--worker-threads` would stop it.
#[test]
fn count_instructions_runs_the_server_with_the_worker_threads_it_is_given() {
    let flags = |args: &[&str]| {
        let mut command = Command::new(Path::new(ROOT).join("scripts/measure/count-instructions.sh"));
        command.arg("--dry-run").args(args);
        let output = common::output_within(command, Duration::from_secs(10));
        assert_eq!(output.code, 0, "{}", output.stderr);
        output.stdout.trim().to_string()
    };
    assert_eq!(flags(&[]), "--worker-threads 1");
    assert_eq!(flags(&["--worker-threads", "2"]), "--worker-threads 2");
    assert_eq!(flags(&["--worker-threads=2", "--max-batch", "10"]), "--worker-threads=2 --max-batch 10");
}

/// A quick start a page shows: where its marker says it comes from, and the code block.
struct Snippet {
    /// The page that shows it, relative to the repository.
    readme: String,
    /// The file it comes from, relative to the repository.
    file: String,
    /// Only the part of the file between `NAME:begin` and `NAME:end`: NAME.
    marked: Option<String>,
    /// The code block's language and text.
    language: String,
    code: String,
}

/// Every `<!-- snippet: PATH -->` block of `readme` (a path relative to the repository; PATH
/// is relative to the page).
fn snippets(readme: &str) -> Vec<Snippet> {
    let text = std::fs::read_to_string(Path::new(ROOT).join(readme)).unwrap();
    let dir = Path::new(readme).parent().unwrap();
    let mut found = Vec::new();
    for part in text.split("<!-- snippet: ").skip(1) {
        let (marker, rest) = part.split_once(" -->\n```").unwrap_or_else(|| {
            panic!("{readme}: a snippet marker with no code block under it: {}", &part[..60.min(part.len())])
        });
        let (path, marked) = match marker.split_once(", ") {
            None => (marker, None),
            Some((path, how)) => {
                let name = how.strip_prefix("between its ").and_then(|how| how.strip_suffix(" markers"));
                let name = name.unwrap_or_else(|| panic!("{readme}: a snippet marker says {how:?}"));
                (path, Some(name.to_string()))
            }
        };
        let (language, rest) = rest.split_once('\n').unwrap();
        let (code, after) = rest.split_once("```\n").unwrap();
        assert!(after.starts_with("<!-- end snippet -->"), "{readme}: the snippet of {path} has no end marker");
        let file = dir.join(path).to_str().unwrap().to_string();
        found.push(Snippet {
            readme: readme.to_string(),
            file,
            marked,
            language: language.to_string(),
            code: code.to_string(),
        });
    }
    found
}

/// The lines of `file` between its `NAME:begin` and `NAME:end` comments (`quick-start:begin`),
/// with their common indentation taken off.
fn marked_region(file: &str, name: &str) -> String {
    let lines: Vec<&str> = file.lines().collect();
    let marker = |end: &str| {
        let marker = format!("{name}:{end}");
        lines.iter().position(|l| l.trim_end().ends_with(&marker)).unwrap_or_else(|| panic!("no {marker} marker"))
    };
    let (begin, end) = (marker("begin"), marker("end"));
    let region = &lines[begin + 1..end];
    let indent =
        region.iter().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min().unwrap_or(0);
    region.iter().map(|l| if l.len() >= indent { &l[indent..] } else { l.trim_start() }).collect::<Vec<_>>().join("\n")
        + "\n"
}

/// Each quick start the pages show is the code of the file its marker names (that file's
/// own tests run it against a real server: `tests/client.rs` for Rust, each client's test.sh
/// for the others), and every language of the clients has one, as curl does over the
/// Connect protocol (run by `tests/connect.rs`). A page edited on its own, or an example
/// changed without the page, fails here, whatever toolchains this machine has.
#[test]
fn every_quick_start_is_code_that_a_test_runs_and_every_language_has_one() {
    let all: Vec<Snippet> = markdown_pages().iter().flat_map(|page| snippets(page)).collect();
    for snippet in &all {
        let file = std::fs::read_to_string(Path::new(ROOT).join(&snippet.file))
            .unwrap_or_else(|e| panic!("{}: the snippet's file {}: {e}", snippet.readme, snippet.file));
        if let Some(name) = &snippet.marked {
            let region = marked_region(&file, name);
            assert!(
                snippet.code.contains(&region),
                "{}: the quick start differs from the marked part of {}:\n{region}",
                snippet.readme,
                snippet.file
            );
        } else {
            assert_eq!(
                snippet.code, file,
                "{}: the quick start differs from {}: copy the file into the page",
                snippet.readme, snippet.file
            );
        }
    }
    let languages: Vec<&str> = all.iter().map(|s| s.language.as_str()).collect();
    for language in ["rust", "go", "python", "java", "ts"] {
        assert!(languages.contains(&language), "no {language} quick start in the pages: {languages:?}");
    }
    assert!(
        all.iter().any(|s| s.language == "rust" && s.readme == "docs/api/rust-client.md"),
        "docs/api/rust-client.md shows no Rust quick start"
    );
    for page in ["README.md", "docs/api/connect.md"] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(page)).unwrap();
        assert!(
            text.contains("<!-- connect examples: run by tests/connect.rs -->\n```sh\ncurl "),
            "no curl quick start in {page}"
        );
    }
}

/// The pages whose links are checked, relative to the repository: the front page, every page
/// under `docs/`, the changelog, and the READMEs of `deploy/` and of the clients.
fn markdown_pages() -> Vec<String> {
    fn under(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                under(&path, found);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    let root = Path::new(ROOT);
    let mut found = Vec::new();
    under(&root.join("docs"), &mut found);
    for entry in std::fs::read_dir(root.join("clients")).unwrap() {
        let readme = entry.unwrap().path().join("README.md");
        if readme.is_file() {
            found.push(readme);
        }
    }
    let mut pages: Vec<String> =
        found.iter().map(|p| p.strip_prefix(root).unwrap().to_str().unwrap().to_string()).collect();
    pages.sort();
    let mut all: Vec<String> =
        ["README.md", "CHANGELOG.md", "deploy/README.md", "clients/README.md"].map(String::from).into();
    all.extend(pages);
    all
}

/// The lines of a Markdown page outside fenced code blocks, with their 1-based numbers.
fn outside_code(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m))
                if open == m && trimmed.trim_end().trim_start_matches(m.chars().next().unwrap()).is_empty() =>
            {
                fence = None
            }
            (None, None) => lines.push((i + 1, line)),
            _ => {}
        }
    }
    lines
}

/// The anchor GitHub gives a heading's text: lower case, every character but letters,
/// digits, hyphens, underscores and spaces dropped (backticks, punctuation, symbols), each
/// space a hyphen.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a page's headings, as GitHub makes them: a heading whose slug came before
/// gets `-1`, `-2`, ... in order.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for (_, line) in outside_code(text) {
        let hashes = line.len() - line.trim_start_matches('#').len();
        if !(1..=6).contains(&hashes) || (line.len() > hashes && !line[hashes..].starts_with([' ', '\t'])) {
            continue;
        }
        // A closing run of `#`s is not part of the heading.
        let heading = line[hashes..].trim().trim_end_matches('#');
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_insert(0);
        let anchor = if *count == 0 { base.clone() } else { format!("{base}-{count}") };
        *count += 1;
        anchors.insert(anchor);
    }
    anchors
}

/// The targets of a line's Markdown links, inline (`[text](target)`, images too) and
/// reference definitions (`[label]: target`); code spans are left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut text = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        text.push_str(&rest[..start]);
        let run = rest[start..].len() - rest[start..].trim_start_matches('`').len();
        let after = &rest[start + run..];
        let close = "`".repeat(run);
        match after.find(&close) {
            Some(end) => rest = &after[end + run..],
            None => {
                text.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    text.push_str(rest);
    let mut targets = Vec::new();
    let trimmed = text.trim_start();
    if trimmed.starts_with('[')
        && let Some((label, target)) = trimmed.split_once("]:")
        && !label.contains(']')
        && let Some(target) = target.split_whitespace().next()
    {
        targets.push(target.trim_matches(['<', '>']).to_string());
    }
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("").trim_matches(['<', '>']);
        targets.push(target.to_string());
        rest = &after[end..];
    }
    targets
}

/// `path` with its `.` and `..` resolved by name (so that messages name the page plainly).
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with `target` as a link from the page `from` (relative to the repository):
/// a missing file, or an anchor no heading of the target page has. `None`: it is fine, or
/// points outside the repository (a web address, mail).
fn broken(from: &str, target: &str, pages: &mut BTreeMap<PathBuf, BTreeSet<String>>) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".to_string());
    }
    if ["http://", "https://", "mailto:"].iter().any(|scheme| target.starts_with(scheme)) {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let root = Path::new(ROOT);
    let file = normal(&if path.is_empty() {
        root.join(from)
    } else if let Some(absolute) = path.strip_prefix('/') {
        root.join(absolute)
    } else {
        root.join(from).parent().unwrap().join(path)
    });
    if !file.exists() {
        return Some(format!("{path} does not exist"));
    }
    let anchor = anchor?;
    let page = if file.is_dir() { file.join("README.md") } else { file };
    if page.extension().is_none_or(|e| e != "md") {
        return Some(format!("#{anchor} on {}, which is not a Markdown page", page.display()));
    }
    let known = pages.entry(page.clone()).or_insert_with(|| {
        anchors(&std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display())))
    });
    if known.contains(anchor) {
        None
    } else {
        Some(format!("no heading of {} has the anchor #{anchor}", page.strip_prefix(root).unwrap_or(&page).display()))
    }
}

/// This repository's files as GitHub shows them: runbook URLs may name a page this way.
const BLOB: &str = "https://github.com/snowmint/snowmint/blob/main/";

/// Every relative link of every page leads to a file of the tree, and every `#anchor` (on its
/// own page or another) to a heading of that page, under GitHub's rules; so does every
/// `runbook_url` of the alerts and every link into this repository under `deploy/`. Every
/// broken one is reported, with its file and line.
#[test]
fn every_link_between_the_pages_leads_to_a_page_and_a_heading() {
    let mut known = BTreeMap::new();
    let mut problems = Vec::new();
    let mut links = 0;
    for page in markdown_pages() {
        let text = std::fs::read_to_string(Path::new(ROOT).join(&page)).unwrap();
        for (number, line) in outside_code(&text) {
            for target in link_targets(line) {
                links += 1;
                if let Some(problem) = broken(&page, &target, &mut known) {
                    problems.push(format!("{page}:{number}: ({target}) {problem}"));
                }
            }
        }
    }
    assert!(links > 100, "only {links} links found: the pages were not read");

    // The alerts' runbook URLs, and any other link into this repository, under deploy/.
    let mut files = Vec::new();
    let mut dirs = vec![Path::new(ROOT).join("deploy")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut runbook_urls: BTreeMap<String, usize> = BTreeMap::new();
    for file in files {
        let name = file.strip_prefix(ROOT).unwrap().to_str().unwrap().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let mut targets = Vec::new();
            if let Some((_, value)) = line.split_once("runbook_url:") {
                let value = value.trim().trim_matches(['"', '\'']);
                *runbook_urls.entry(name.clone()).or_default() += 1;
                match value.strip_prefix(BLOB) {
                    Some(path) => targets.push(path.to_string()),
                    None if value.contains("://") => {
                        problems.push(format!("{name}:{}: runbook_url {value} is not a page of this repository", i + 1))
                    }
                    None => targets.push(value.trim_start_matches('/').to_string()),
                }
            } else {
                let mut rest = line;
                while let Some(at) = rest.find(BLOB) {
                    let url = &rest[at + BLOB.len()..];
                    let end =
                        url.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')')).unwrap_or(url.len());
                    targets.push(url[..end].to_string());
                    rest = &url[end..];
                }
            }
            for target in targets {
                // Relative to the repository: resolved as from a page at its root.
                if let Some(problem) = broken("README.md", &target, &mut known) {
                    problems.push(format!("{name}:{}: ({target}) {problem}", i + 1));
                }
            }
        }
    }
    for rules in ["deploy/prometheus/snowmint-rules.yaml", "deploy/base/prometheusrule.yaml"] {
        assert!(runbook_urls.get(rules).is_some_and(|&n| n > 0), "no runbook_url read in {rules}: {runbook_urls:?}");
    }
    assert!(problems.is_empty(), "{} broken links:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(slug("Running for months: compaction and alarms"), "running-for-months-compaction-and-alarms");
    assert_eq!(slug("`snowmint decode <ID>`"), "snowmint-decode-id");
    assert_eq!(
        slug("`scripts/measure/bench.sh --slots-only --peers`: IDs/s with k slots, beside ferroid"),
        "scriptsmeasurebenchsh---slots-only---peers-idss-with-k-slots-beside-ferroid"
    );
    assert_eq!(slug("snake_case and kebab-case"), "snake_case-and-kebab-case");
    let page = "# Top\n\n## Same\n\n```sh\n# not a heading\n```\n\n### Same\n\n## Same ##\n#nospace\n";
    let expected: BTreeSet<String> = ["top", "same", "same-1", "same-2"].map(String::from).into();
    assert_eq!(anchors(page), expected);
    assert_eq!(link_targets("see [a](x.md#b), `[c](not-a-link)` and ![i](img.png)"), ["x.md#b", "img.png"]);
    assert_eq!(link_targets("[`code` label](y.md \"title\")"), ["y.md"]);
    assert_eq!(link_targets("[ref]: <z.md#c>"), ["z.md#c"]);
}
