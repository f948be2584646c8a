//! The README's performance section against the tree: every figure sits under the command
//! that produces it, each such command exists here, and the instruction-count script runs
//! the server with the flags it is given.

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
