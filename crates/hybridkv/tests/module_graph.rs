//! The engine's modules form no cycle (issue 15).
//!
//! Reads every source file under `crates/hybridkv/src`, attributes it to its top-level
//! module (`src/write/mod.rs` and `src/write/batch.rs` both belong to `write`), and collects
//! the top-level modules it names through `crate::` paths in code (comments are skipped;
//! `use crate::{a::X, b::Y}` names `a` and `b`). It prints each module's imports and fails
//! on a cycle, printing it. Run it alone with
//!
//! ```text
//! cargo test -p hybridkv --test module_graph -- --nocapture
//! ```
//!
//! The modules `db` (the public handle) and `fuzzing` (entry points for the fuzz targets)
//! sit on top and may name anything; nothing names them but `lib.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules declared in `lib.rs`.
fn modules(lib: &str) -> BTreeSet<String> {
    lib.lines()
        .map(str::trim)
        .filter(|l| !l.starts_with("//"))
        .filter_map(|l| {
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            let name = l.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.trim().to_string())
        })
        .collect()
}

/// The identifiers at the start of each path that follows `crate::` in `code`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `crate::{a::X, b, c::{d, e}}`: the first segment of each top-level item.
            let mut depth = 0usize;
            let mut item_start = true;
            let mut ident = String::new();
            for ch in group.chars() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => ident.push(c),
                    _ if item_start && !ident.is_empty() => {
                        out.push(std::mem::take(&mut ident));
                        item_start = false;
                    }
                    _ => {}
                }
            }
            if !ident.is_empty() {
                out.push(ident);
            }
        } else {
            let ident: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(ident);
        }
    }
    out
}

/// `module -> modules it names`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let known = modules(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(known.len() > 10, "lib.rs declares {known:?}");
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if !known.contains(&module) {
            continue; // lib.rs itself
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let names = edges.entry(module.clone()).or_default();
        for target in crate_paths(&code) {
            if target != module && known.contains(&target) {
                names.insert(target);
            }
        }
    }
    edges
}

/// A cycle through `start`, if any (depth-first search).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|n| n == next).unwrap();
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(next, edges, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in edges.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(node, edges, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn crate_paths_reads_plain_and_grouped_imports() {
    let code = "use crate::io::{Io, SimFs};\nuse crate::{db::Db, error::Error, options};\n\
                let x = crate::level::reader::parse(y);";
    assert_eq!(
        crate_paths(code),
        vec!["io", "db", "error", "options", "level"]
    );
}

#[test]
fn find_cycle_finds_one_and_only_one() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    assert_eq!(find_cycle(&g), None);
    g.entry("c".into()).or_default().insert("a".into());
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

#[test]
fn the_engine_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph(&src);
    for (module, names) in &edges {
        let list: Vec<&str> = names.iter().map(String::as_str).collect();
        println!("{module:>12} -> {}", list.join(" "));
    }
    if let Some(cycle) = find_cycle(&edges) {
        panic!("module cycle: {}", cycle.join(" -> "));
    }
    for top in ["db", "fuzzing"] {
        let named_by: Vec<&String> = edges
            .iter()
            .filter(|(m, names)| *m != top && names.contains(top))
            .map(|(m, _)| m)
            .collect();
        assert!(named_by.is_empty(), "{top} is named by {named_by:?}");
    }
}
