//! The Redis adapter (`src/redis/`) is layered: `ffi.rs` at the bottom,
//! and no file imports, directly or through others, a file that imports
//! it. Where a lower file must call up, the upper one hands it a function
//! at load (`scheduler::Work`, `latches::set_awaiter_answer`). These tests
//! read the sources and fail on the first import that closes a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each file of `src/redis/` (by module name) and the sibling modules its
/// code names (`super::x`, `crate::redis::x`, `use super::{x, y}`), outside
/// comments and its test module.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/redis");
    let mut sources = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("src/redis is readable") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|ext| ext == "rs") {
            let name = path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .expect("a file name")
                .to_string();
            let text = std::fs::read_to_string(&path).expect("a readable source file");
            sources.insert(name, text);
        }
    }
    let modules: BTreeSet<String> = sources.keys().cloned().collect();
    sources
        .iter()
        .map(|(name, text)| {
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            let mut named = BTreeSet::new();
            for line in code.lines() {
                let line = line.trim_start();
                if line.starts_with("//") {
                    continue;
                }
                for prefix in ["super::", "crate::redis::"] {
                    for (at, _) in line.match_indices(prefix) {
                        let rest = &line[at + prefix.len()..];
                        let group = match rest.strip_prefix('{') {
                            Some(inside) => inside.split('}').next().unwrap_or_default(),
                            None => rest,
                        };
                        let words = group.split(|c: char| !(c.is_alphanumeric() || c == '_'));
                        let words: Vec<&str> = if rest.starts_with('{') {
                            words.collect()
                        } else {
                            words.take(1).collect()
                        };
                        for word in words {
                            if modules.contains(word) && word != name {
                                named.insert(word.to_string());
                            }
                        }
                    }
                }
            }
            (name.clone(), named)
        })
        .collect()
}

/// The files left once every file that imports only removed files has been
/// removed, bottom up: empty when there is no cycle.
fn files_in_cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let mut left: BTreeSet<String> = graph.keys().cloned().collect();
    loop {
        let bottom: Vec<String> = left
            .iter()
            .filter(|name| graph[*name].iter().all(|dep| !left.contains(dep)))
            .cloned()
            .collect();
        if bottom.is_empty() {
            return left;
        }
        for name in bottom {
            left.remove(&name);
        }
    }
}

#[test]
fn the_adapter_has_no_import_cycle() {
    let graph = imports();
    assert!(
        graph.len() > 20 && graph["upkeep"].contains("scheduler"),
        "the source reader found the adapter's files and imports: {graph:?}"
    );
    let cycles = files_in_cycles(&graph);
    let edges: Vec<String> = cycles
        .iter()
        .map(|name| {
            let deps: Vec<&String> = graph[name].iter().filter(|d| cycles.contains(*d)).collect();
            format!("{name} -> {deps:?}")
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "these src/redis files import each other in a cycle: {edges:#?}"
    );
}

#[test]
fn the_bottom_files_stay_at_the_bottom() {
    let graph = imports();
    let allowed: [(&str, &[&str]); 5] = [
        ("ffi", &["boxes"]),
        ("scheduler", &["ffi", "timeouts", "wakeup"]),
        ("stats", &["audit", "ffi"]),
        ("latches", &["boxes", "ffi", "propagation", "typeio"]),
        ("typeio", &[]),
    ];
    for (name, may_import) in allowed {
        let extra: Vec<&String> = graph[name]
            .iter()
            .filter(|dep| !may_import.contains(&dep.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "{name}.rs imports {extra:?}, above it (it may import {may_import:?})"
        );
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut graph = imports();
    graph
        .get_mut("scheduler")
        .expect("scheduler.rs")
        .insert("upkeep".into());
    let cycles = files_in_cycles(&graph);
    assert!(
        cycles.contains("scheduler") && cycles.contains("upkeep"),
        "{cycles:?}"
    );
}
