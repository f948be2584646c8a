//! The READMEs against the tree: every performance figure sits under the command that
//! produces it, each such command exists here, and the instruction-count script runs the
//! server with the flags it is given; every quick start shown is the code of a file that a
//! test runs, and every client language has one.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The README's `## Performance` section, up to the next `## ` heading.
fn performance_section() -> String {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let start = readme.find("\n## Performance\n").expect("the README has a performance section");
    let section = &readme[start + 1..];
    let end = section[3..].find("\n## ").map_or(section.len(), |i| i + 3);
    section[..end].to_string()
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
    let mut parts = section.split("\n### ");
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

/// A quick start a README shows: where its marker says it comes from, and the code block.
struct Snippet {
    /// The README that shows it, relative to the repository.
    readme: &'static str,
    /// The file it comes from, relative to the repository.
    file: String,
    /// Only the part of the file between `quick-start:begin` and `quick-start:end`.
    marked: bool,
    /// The code block's language and text.
    language: String,
    code: String,
}

/// Every `<!-- snippet: PATH -->` block of `readme` (a path relative to the repository).
fn snippets(readme: &'static str) -> Vec<Snippet> {
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
        found.push(Snippet { readme, file, marked, language: language.to_string(), code: code.to_string() });
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

/// Each quick start the READMEs show is the code of the file its marker names (that file's
/// own tests run it against a real server: `tests/client.rs` for Rust, each client's test.sh
/// for the others), and every language of the clients has one, as curl does over the
/// Connect protocol (run by `tests/connect.rs`). A README edited on its own, or an example
/// changed without the README, fails here, whatever toolchains this machine has.
#[test]
fn every_quick_start_is_code_that_a_test_runs_and_every_language_has_one() {
    let all: Vec<Snippet> = snippets("README.md").into_iter().chain(snippets("clients/README.md")).collect();
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
        assert!(languages.contains(&language), "no {language} quick start in the READMEs: {languages:?}");
    }
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    assert!(readme.contains("<!-- connect examples: run by tests/connect.rs -->\n```sh\ncurl "), "no curl quick start");
}
