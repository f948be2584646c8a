//! The library's floors: each top-level module of `src/` sits on one floor, and its code
//! (tests left out) may name only modules on floors below its own. So no import circle can
//! form, and no lower floor reaches up to a higher one. A new module must be given a floor
//! here before it passes. `docs/design/code-layout.md` describes the same floors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// From the bottom: the pure parts, the cores, the stores, the safety machines, the history
/// of what they held, their composition, the wire, and the wiring. `sim` (test builds only) drives the composition
/// beside the server.
const FLOORS: &[&[&str]] = &[
    &["layout", "clock", "clock_memory", "defects", "metrics", "opaque", "proto"],
    &["clock_filter", "generator", "grant", "uuid7"],
    &["store"],
    &["keeper", "minter", "sequence", "upkeep"],
    &["history", "tenant"],
    &["node"],
    &["rpc"],
    &["server", "sim"],
];

/// The files of one top-level module: `src/<name>.rs` and everything under `src/<name>/`.
fn files_of(src: &Path, name: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src.join(format!("{name}.rs"));
    if file.is_file() {
        files.push(file);
    }
    let mut dirs = vec![src.join(name)];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files
}

/// The code of a file without its unit tests (from `#[cfg(test)]` before `mod tests` on) and
/// without comments.
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim();
        if trimmed == "#[cfg(test)]" && lines.peek().is_some_and(|next| next.trim().starts_with("mod tests")) {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line.split(" // ").next().unwrap_or(line));
        code.push('\n');
    }
    code
}

/// The top-level modules that `code` names through `crate::`, including inside `crate::{..}`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // The first name of each item at the group's own depth: `crate::{a::{b, c}, d}`
            // names `a` and `d`.
            let (mut depth, mut item_start) = (0, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        names.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            names.insert(ident(rest));
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names
}

/// Each module of `src/` (the binary's `main.rs` and `cli/`, and `lib.rs`, left out) with the
/// modules its code names.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_string();
        if ["lib", "main", "cli"].contains(&name.as_str()) || graph.contains_key(&name) {
            continue;
        }
        let mut named = BTreeSet::new();
        for file in files_of(src, &name) {
            named.extend(named_modules(&code_of(&std::fs::read_to_string(file).unwrap())));
        }
        named.remove(&name);
        graph.insert(name, named);
    }
    graph
}

fn floor_of(name: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&name))
}

/// What is wrong with `graph` against [`FLOORS`]: modules with no floor, and arrows that do
/// not point down.
fn violations(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = Vec::new();
    for (module, named) in graph {
        let Some(floor) = floor_of(module) else {
            found.push(format!("{module} has no floor in tests/layers.rs"));
            continue;
        };
        for other in named {
            match floor_of(other) {
                Some(theirs) if theirs < floor => {}
                Some(theirs) => found.push(format!(
                    "{module} (floor {}) names {other} (floor {}): arrows point down only",
                    floor + 1,
                    theirs + 1
                )),
                None => found.push(format!("{module} names {other}, which has no floor")),
            }
        }
    }
    found
}

#[test]
fn every_import_points_to_a_lower_floor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    assert!(graph.contains_key("keeper") && graph.contains_key("node"), "{graph:?}");
    assert!(graph["node"].contains("keeper") && graph["node"].contains("minter"), "{graph:?}");
    let found = violations(&graph);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The check sees what it must: an arrow up, a circle and a module with no floor.
#[test]
fn an_upward_arrow_a_circle_and_a_module_with_no_floor_are_each_found() {
    let graph = |edges: &[(&str, &[&str])]| -> BTreeMap<String, BTreeSet<String>> {
        edges.iter().map(|(m, named)| (m.to_string(), named.iter().map(|n| n.to_string()).collect())).collect()
    };
    assert!(violations(&graph(&[("node", &["keeper", "minter"]), ("keeper", &["store"])])).is_empty());
    let up = violations(&graph(&[("keeper", &["node"])]));
    assert_eq!(up.len(), 1, "{up:?}");
    let circle = violations(&graph(&[("keeper", &["minter"]), ("minter", &["keeper"])]));
    assert_eq!(circle.len(), 2, "{circle:?}");
    assert_eq!(violations(&graph(&[("newcomer", &["layout"])])).len(), 1);
    let code = code_of(
        "use crate::{layout::{Layout, Slot}, store};\n// crate::rpc\nfn f() { crate::grant::x() }\n#[cfg(test)]\nmod tests { use crate::server; }",
    );
    assert_eq!(named_modules(&code), ["grant", "layout", "store"].map(String::from).into());
}
