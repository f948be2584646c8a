//! `snowmint audit`: reads the whole history (from etcd or a state dir) and checks the slots'
//! hand-over rules ([`snowmint::history::audit`]) and that no two segments of a named
//! sequence held the same value ([`snowmint::history::segment_audit`]); prints a summary of
//! each, and exits non-zero naming the offending pair when a rule is broken or a record
//! cannot be read.

use clap::Args;
use snowmint::history::audit::audit;
use snowmint::history::segment_audit::audit_segments;

use super::flags::HistoryArgs;

#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    #[command(flatten)]
    pub history: HistoryArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Prints the audit; `Err` (the process exits 1) when it fails.
pub async fn run(args: &AuditArgs) -> Result<(), String> {
    let Some(book) = args.history.book().await? else {
        return Err("audit needs the history to read: --etcd-endpoints (and --etcd-prefix), or --state-dir".into());
    };
    let (entries, unreadable) = book.list(None).await.map_err(|e| format!("cannot read {}: {e}", book.describe()))?;
    let (segments, unreadable_segments) =
        book.list_segments(None).await.map_err(|e| format!("cannot read {}: {e}", book.describe()))?;
    let report = audit(&entries);
    let sequences = audit_segments(&segments);
    let unreadable: Vec<String> = unreadable.iter().chain(&unreadable_segments).map(ToString::to_string).collect();
    let violations: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    let overlaps: Vec<String> = sequences.overlaps.iter().map(ToString::to_string).collect();
    if args.json {
        let json = serde_json::json!({
            "history": book.describe(),
            "passed": report.passed() && sequences.passed() && unreadable.is_empty(),
            "slots": report.slots,
            "holders": report.holders,
            "hand_overs": report.hand_overs,
            "open": report.open,
            "unclosed": report.unclosed,
            "oldest_ms": report.oldest_ms,
            "violations": violations,
            "sequences": {
                "sequences": sequences.sequences,
                "segments": sequences.segments,
                "given_back": sequences.given_back,
                "values": sequences.values,
                "oldest_ms": sequences.oldest_ms,
                "overlaps": overlaps,
            },
            "unreadable": unreadable,
        });
        println!("{json}");
    } else {
        println!("{}: {}", book.describe(), report.summary());
        println!("{}: {}", book.describe(), sequences.summary());
        for location in &report.unclosed {
            println!("left open with a successor (its window ends at the successor's floor): {location}");
        }
        for line in unreadable.iter().chain(&violations).chain(&overlaps) {
            println!("FAIL {line}");
        }
    }
    match (violations.first(), overlaps.first(), unreadable.first()) {
        (Some(first), _, _) => Err(format!("audit failed: {} broken hand-over(s); first: {first}", violations.len())),
        (None, Some(first), _) => {
            Err(format!("audit failed: {} overlapping segment(s); first: {first}", overlaps.len()))
        }
        (None, None, Some(first)) => {
            Err(format!("audit failed: {} record(s) cannot be checked; first: {first}", unreadable.len()))
        }
        (None, None, None) => Ok(()),
    }
}
