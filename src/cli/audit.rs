//! `snowmint audit`: reads the whole slot history (from etcd or a state dir) and checks the
//! hand-over rules ([`snowmint::history::audit`]); prints a summary, and exits non-zero
//! naming the offending pair when a rule is broken or a record cannot be read.

use clap::Args;
use snowmint::history::audit::audit;

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
    let report = audit(&entries);
    let unreadable: Vec<String> = unreadable.iter().map(ToString::to_string).collect();
    let violations: Vec<String> = report.violations.iter().map(ToString::to_string).collect();
    if args.json {
        let json = serde_json::json!({
            "history": book.describe(),
            "passed": report.passed() && unreadable.is_empty(),
            "slots": report.slots,
            "holders": report.holders,
            "hand_overs": report.hand_overs,
            "open": report.open,
            "unclosed": report.unclosed,
            "oldest_ms": report.oldest_ms,
            "violations": violations,
            "unreadable": unreadable,
        });
        println!("{json}");
    } else {
        println!("{}: {}", book.describe(), report.summary());
        for location in &report.unclosed {
            println!("left open with a successor (its window ends at the successor's floor): {location}");
        }
        for line in unreadable.iter().chain(&violations) {
            println!("FAIL {line}");
        }
    }
    match (violations.first(), unreadable.first()) {
        (Some(first), _) => Err(format!("audit failed: {} broken hand-over(s); first: {first}", violations.len())),
        (None, Some(first)) => {
            Err(format!("audit failed: {} record(s) cannot be checked; first: {first}", unreadable.len()))
        }
        (None, None) => Ok(()),
    }
}
