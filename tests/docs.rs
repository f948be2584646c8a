//! The performance tooling against the tree: the instruction-count script runs the server
//! with the flags it is given.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

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
