//! Module by module, no modules of the page's script (static/js/*.js) import each other in a loop, as no files
//! of the library do (tests/it/import_cycles.rs). A module the others need state or a function from goes in a
//! leaf they all import (state.js, format.js), or is handed a callback by the module above it (job-list.js
//! hands its showJob to event-stream.js; main.js hands the list's functions to job-actions.js). Read from the
//! source files themselves: an `import … from "./x.js"` (or `export … from`, or `import("./x.js")`) is an edge.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common::REPO;

use super::served::imported_specifiers;

/// The module → modules graph of a folder of ES modules, by file name (`job-list.js`); only the folder's
/// own modules (`./x.js`) count.
fn module_graph(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "js") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let source = std::fs::read_to_string(&path).unwrap();
        graph.insert(name, edges_of(&source));
    }
    graph
}

/// The modules of the same folder a module's source imports.
fn edges_of(source: &str) -> BTreeSet<String> {
    imported_specifiers(source).into_iter().filter_map(|specifier| specifier.strip_prefix("./").filter(|name| !name.contains('/')).map(str::to_string)).collect()
}

/// The groups of modules that import each other in a loop (a module that imports itself is one), each sorted:
/// two modules are in one group when each reaches the other.
fn loops(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reached_from = |start: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo: Vec<&String> = graph.get(start).into_iter().flatten().collect();
        while let Some(next) = todo.pop() {
            if seen.insert(next.clone()) {
                todo.extend(graph.get(next).into_iter().flatten());
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> = graph.keys().map(|module| (module, reached_from(module))).collect();
    let mut found: Vec<Vec<String>> = Vec::new();
    for (module, reached) in &reach {
        if !reached.contains(*module) || found.iter().any(|group| group.contains(module)) {
            continue;
        }
        let group: Vec<String> = reach.iter().filter(|(other, back)| reached.contains(**other) && back.contains(*module)).map(|(other, _)| other.to_string()).collect();
        found.push(group);
    }
    found
}

#[test]
fn no_page_modules_import_each_other_in_a_loop() {
    let graph = module_graph(&Path::new(REPO).join("static/js"));
    assert!(graph.len() > 20, "only {} page modules found", graph.len());
    let found = loops(&graph);
    let described: Vec<String> = found
        .iter()
        .map(|group| {
            let edges: Vec<String> = group.iter().flat_map(|from| graph[from].iter().filter(|to| group.contains(to)).map(move |to| format!("    {from} -> {to}"))).collect();
            format!("  {}\n{}", group.join(" <-> "), edges.join("\n"))
        })
        .collect();
    // State several modules share goes in a leaf they all import; a module that must call the one above it is
    // handed that function (a callback) instead of importing it.
    assert!(described.is_empty(), "page modules that import each other in a loop:\n{}", described.join("\n"));
}

#[test]
fn module_graph_reads_imports_and_finds_loops() {
    let graph = module_graph(&Path::new(REPO).join("static/js"));
    let imports = |from: &str, to: &str| graph.get(from).is_some_and(|targets| targets.contains(to));
    assert!(imports("main.js", "job-list.js") && imports("job-list.js", "job-card.js") && imports("job-card.js", "card-head.js"));
    assert!(graph.get("state.js").is_some_and(BTreeSet::is_empty), "state.js is a leaf: {:?}", graph.get("state.js"));
    // A statement over several lines, `export … from`, a dynamic import; nothing from a comment or a string.
    let source = "import {\n  a,\n  b,\n} from \"./multi.js\";\nexport { c } from './re-export.js';\nconst later = import(\"./dynamic.js\");\n// import { d } from \"./comment.js\";\nconst s = \"import x from './string.js'\";\n";
    let found: Vec<String> = edges_of(source).into_iter().collect();
    assert_eq!(found, ["dynamic.js", "multi.js", "re-export.js"]);
    // A two-module loop and a module importing itself are found; a module they import is in neither.
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a.js".to_string(), BTreeSet::from(["b.js".to_string()])),
        ("b.js".to_string(), BTreeSet::from(["a.js".to_string(), "c.js".to_string()])),
        ("c.js".to_string(), BTreeSet::new()),
        ("d.js".to_string(), BTreeSet::from(["d.js".to_string()])),
    ]
    .into();
    assert_eq!(loops(&graph), vec![vec!["a.js".to_string(), "b.js".to_string()], vec!["d.js".to_string()]]);
}
