//! The documentation against the tree: every performance figure sits under the command that
//! produces it, each such command exists here, and the instruction-count script runs the
//! server with the flags it is given; every quick start shown is the code of a file that a
//! test runs, and every client language has one.

mod common;

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
    for expected in ["scripts/bench.sh", "scripts/count-instructions.sh", "cargo bench --bench generator"] {
        assert!(commands.iter().any(|c| c.starts_with(expected)), "no part for {expected}: {commands:?}");
    }
    assert!(Path::new(ROOT).join("CHANGELOG.md").exists(), "the history has nowhere to go");
}

/// The instruction count runs the server on one worker thread unless told another count;
/// `serve` takes each flag once, so a second `--worker-threads` would stop it.
#[test]
fn count_instructions_runs_the_server_with_the_worker_threads_it_is_given() {
    let flags = |args: &[&str]| {
        let mut command = Command::new(Path::new(ROOT).join("scripts/count-instructions.sh"));
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
    /// Only the part of the file between `quick-start:begin` and `quick-start:end`.
    marked: bool,
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
            None => (marker, false),
            Some((path, "between its quick-start markers")) => (path, true),
            Some((_, how)) => panic!("{readme}: a snippet marker says {how:?}"),
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

/// The lines of `file` between its `quick-start:begin` and `quick-start:end` comments, with
/// their common indentation taken off.
fn marked_region(file: &str) -> String {
    let lines: Vec<&str> = file.lines().collect();
    let begin = lines.iter().position(|l| l.trim_end().ends_with("quick-start:begin")).expect("a begin marker");
    let end = lines.iter().position(|l| l.trim_end().ends_with("quick-start:end")).expect("an end marker");
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
        if snippet.marked {
            let region = marked_region(&file);
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

/// The pages of the documentation, relative to the repository: the front page, every page
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
