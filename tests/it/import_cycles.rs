//! File by file, no files of the library import each other in a loop (a file that imports its folder's
//! mod.rs while mod.rs imports it back is such a loop); `layers.rs` keeps the modules' layers. Read from the
//! source files themselves.
//!
//! File level: which file imports which. A path `crate::media::probe::MediaInfo` names src/media/probe.rs (or
//! src/media/probe/mod.rs); a path to an item a folder's mod.rs defines or re-exports (`crate::media::MediaInfo`)
//! names that mod.rs. `super::`, `self::`, `use` groups `{..}` and paths that start at a child module
//! (`probe::run(..)` in media/mod.rs) are resolved the same way. A `mod x;` declaration alone is no import.
//! Test modules count too: a file's code is all of its text.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Strips comments, string and char literals, keeping everything else (lifetimes included) in place.
fn code_of(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if (c == 'r' || c == 'b') && !chars.get(i.wrapping_sub(1)).is_some_and(|p| p.is_alphanumeric() || *p == '_') && {
            // r"..", r#".."#, br".."
            let mut j = i + 1;
            if c == 'b' && chars.get(j) == Some(&'r') {
                j += 1;
            }
            let hashes = chars[j.min(chars.len())..].iter().take_while(|h| **h == '#').count();
            (c == 'r' || j > i + 1) && chars.get(j + hashes) == Some(&'"')
        } {
            let mut j = i + 1;
            if c == 'b' {
                j += 1;
            }
            let hashes = chars[j..].iter().take_while(|h| **h == '#').count();
            j += hashes + 1;
            while j < chars.len() && !(chars[j] == '"' && chars[j + 1..].iter().take(hashes).filter(|h| **h == '#').count() == hashes) {
                j += 1;
            }
            i = j + 1 + hashes;
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                // Past the escaped character: '\'' and '\\' end at the next quote after it.
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Punct(&'static str),
    Other(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphabetic() || c == '_' || (c == '$' && chars.get(i + 1).is_some_and(|n| n.is_alphabetic())) {
            let start = i;
            i += 1;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(Token::Ident(if word == "$crate" { "crate".to_string() } else { word }));
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            out.push(Token::Punct("::"));
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(match c {
                '{' => Token::Punct("{"),
                '}' => Token::Punct("}"),
                ';' => Token::Punct(";"),
                ',' => Token::Punct(","),
                '*' => Token::Punct("*"),
                _ => Token::Other(c),
            });
            i += 1;
        }
    }
    out
}

/// A library file and the module path it defines (`["media", "probe"]` for src/media/probe.rs).
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
}

/// The library's files, walked from lib.rs through `mod x;` declarations (`#[path = ".."]` honoured).
fn library_files(src: &Path) -> Vec<SourceFile> {
    let mut out = Vec::new();
    let mut todo = vec![(src.join("lib.rs"), Vec::<String>::new())];
    while let Some((path, module)) = todo.pop() {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let here = path.parent().unwrap().to_path_buf();
        let is_root = module.is_empty() || path.file_name().is_some_and(|name| name == "mod.rs");
        let child_dir = if is_root { here.clone() } else { here.join(path.file_stem().unwrap()) };
        let mut path_attr: Option<String> = None;
        for line in text.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("#[path = \"") {
                path_attr = rest.split('"').next().map(str::to_string);
                continue;
            }
            let decl = line.trim_start_matches("pub(crate) ").trim_start_matches("pub(super) ").trim_start_matches("pub ");
            if let Some(name) = decl.strip_prefix("mod ").and_then(|rest| rest.strip_suffix(';')) {
                let mut child = module.clone();
                child.push(name.to_string());
                let file = match path_attr.take() {
                    Some(relative) => here.join(relative),
                    None if child_dir.join(format!("{name}.rs")).is_file() => child_dir.join(format!("{name}.rs")),
                    None => child_dir.join(name).join("mod.rs"),
                };
                todo.push((file, child));
            } else if !line.starts_with("#[") {
                path_attr = None;
            }
        }
        out.push(SourceFile { path, module });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Every module path a file's code names, each as absolute segments (not yet cut down to a module).
fn named_paths(file: &SourceFile, modules: &BTreeMap<Vec<String>, usize>) -> Vec<Vec<String>> {
    let code = code_of(&std::fs::read_to_string(&file.path).unwrap());
    let toks = tokens(&code);
    let mut found = Vec::new();
    // Inline modules (`mod tests { .. }`) open at a brace depth.
    let mut depth = 0usize;
    let mut inline: Vec<(String, usize)> = Vec::new();
    let current = |inline: &Vec<(String, usize)>| {
        let mut module = file.module.clone();
        module.extend(inline.iter().map(|(name, _)| name.clone()));
        module
    };
    // Turns a relative path's first segments into an absolute one, or None for paths outside the crate.
    let absolute = |at: &[String], segments: &[String]| -> Option<Vec<String>> {
        let mut base = at.to_vec();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop()?;
                    rest = &rest[1..];
                }
            }
            Some(first) => {
                let mut child = at.to_vec();
                child.push(first.to_string());
                // A path may start at a child module; anything else (std, serde, a type) is not ours.
                if !modules.contains_key(&child) {
                    return None;
                }
            }
            None => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    };
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Token::Punct("{") => {
                depth += 1;
                i += 1;
            }
            Token::Punct("}") => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct("{"))) = (toks.get(i + 1), toks.get(i + 2)) {
                    depth += 1;
                    inline.push((name.clone(), depth));
                    i += 3;
                } else {
                    i += 1;
                }
            }
            Token::Ident(word) if word == "use" && !matches!(i.checked_sub(1).map(|p| &toks[p]), Some(Token::Punct("::"))) => {
                // `pub use` (any `pub(..)`) re-exports: like `mod x;`, it shapes the module's surface and is no import.
                let mut k = i;
                while k > 0 && matches!(&toks[k - 1], Token::Other('(') | Token::Other(')')) || k > 0 && matches!(&toks[k - 1], Token::Ident(w) if matches!(w.as_str(), "crate" | "super" | "self" | "in")) {
                    k -= 1;
                }
                let re_export = k > 0 && toks[k - 1] == Token::Ident("pub".into());
                // A use tree: expand the groups into flat paths.
                let at = current(&inline);
                let mut end = i + 1;
                let mut level = 0;
                while end < toks.len() {
                    match toks[end] {
                        Token::Punct("{") => level += 1,
                        Token::Punct("}") => level -= 1,
                        Token::Punct(";") if level == 0 => break,
                        _ => {}
                    }
                    end += 1;
                }
                let mut flat = Vec::new();
                use_tree(&toks[i + 1..end], &mut Vec::new(), &mut flat);
                for segments in flat.into_iter().filter(|_| !re_export) {
                    if let Some(path) = absolute(&at, &segments) {
                        found.push(path);
                    }
                }
                i = end + 1;
            }
            Token::Ident(first) => {
                let after_path = matches!(i.checked_sub(1).map(|p| &toks[p]), Some(Token::Punct("::")) | Some(Token::Other('.')));
                let mut segments = vec![first.clone()];
                let mut j = i + 1;
                while let (Some(Token::Punct("::")), Some(Token::Ident(next))) = (toks.get(j), toks.get(j + 1)) {
                    segments.push(next.clone());
                    j += 2;
                }
                // One word alone is no path (`pub(super)`, `pub(crate)`, `self.x`).
                if !after_path && segments.len() > 1 {
                    if let Some(path) = absolute(&current(&inline), &segments) {
                        found.push(path);
                    }
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    found
}

/// Flattens a use tree (`a::{b, c::{d, *}, self}`) into its paths; `self` and `*` stand for their prefix.
fn use_tree(toks: &[Token], prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let mut i = 0;
    let mut path = prefix.clone();
    let flush = |path: &mut Vec<String>, out: &mut Vec<Vec<String>>, prefix: &Vec<String>| {
        if path.len() > prefix.len() {
            out.push(path.clone());
        }
        *path = prefix.clone();
    };
    while i < toks.len() {
        match &toks[i] {
            Token::Ident(word) if word == "as" => i += 2,
            Token::Ident(word) if word == "self" && path.len() == prefix.len() && !prefix.is_empty() => {
                out.push(prefix.clone());
                i += 1;
            }
            Token::Ident(word) => {
                if !matches!(word.as_str(), "pub" | "crate" if i == 0 && word == "pub") {
                    path.push(word.clone());
                }
                i += 1;
            }
            Token::Punct("*") => {
                // A glob stands for its prefix.
                out.push(path.clone());
                path = prefix.clone();
                i += 1;
            }
            Token::Punct("::") => i += 1,
            Token::Punct("{") => {
                let mut end = i + 1;
                let mut level = 1;
                while end < toks.len() {
                    match toks[end] {
                        Token::Punct("{") => level += 1,
                        Token::Punct("}") => {
                            level -= 1;
                            if level == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    end += 1;
                }
                let mut inner = path.clone();
                use_tree(&toks[i + 1..end.min(toks.len())], &mut inner, out);
                path = prefix.clone();
                i = end + 1;
            }
            Token::Punct(",") => {
                flush(&mut path, out, prefix);
                i += 1;
            }
            _ => i += 1,
        }
    }
    flush(&mut path, out, prefix);
}

/// The file → files graph of the library, as paths relative to src/.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = library_files(&src);
    let modules: BTreeMap<Vec<String>, usize> = files.iter().enumerate().map(|(at, file)| (file.module.clone(), at)).collect();
    let name = |at: usize| files[at].path.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
    let mut graph = BTreeMap::new();
    for (at, file) in files.iter().enumerate() {
        let mut targets = BTreeSet::new();
        for mut path in named_paths(file, &modules) {
            // The longest prefix that is a module file names the file.
            while !path.is_empty() && !modules.contains_key(&path) {
                path.pop();
            }
            let target = modules[&path];
            if target != at {
                targets.insert(name(target));
            }
        }
        graph.insert(name(at), targets);
    }
    graph
}

/// Tarjan's strongly connected components with more than one file, each sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, node: &'a str) {
        let at = s.index.len();
        s.index.insert(node, at);
        s.low.insert(node, at);
        s.stack.push(node);
        s.on_stack.insert(node);
        let graph = s.graph;
        for next in graph.get(node).into_iter().flatten() {
            if !s.index.contains_key(next.as_str()) {
                visit(s, next);
                let low = s.low[node].min(s.low[next.as_str()]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next.as_str()) {
                let low = s.low[node].min(s.index[next.as_str()]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            loop {
                let top = s.stack.pop().unwrap();
                s.on_stack.remove(top);
                component.push(top.to_string());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state = State { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), found: Vec::new() };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found.sort();
    state.found
}

#[test]
fn no_files_import_each_other_in_a_loop() {
    let graph = import_graph();
    assert!(graph.len() > 100, "only {} library files found", graph.len());
    let found = cycles(&graph);
    let loops: Vec<String> = found
        .iter()
        .map(|component| {
            let edges: Vec<String> = component
                .iter()
                .flat_map(|from| graph[from].iter().filter(|to| component.contains(to)).map(move |to| format!("    {from} -> {to}")))
                .collect();
            format!("  {}\n{}", component.join(" <-> "), edges.join("\n"))
        })
        .collect();
    // A type several files share goes in a leaf they all import (as executor/context.rs, media/info.rs).
    assert!(loops.is_empty(), "files that import each other in a loop:\n{}", loops.join("\n"));
}

#[test]
fn file_graph_resolves_paths_groups_and_relatives() {
    let graph = import_graph();
    let imports = |from: &str, to: &str| graph.get(from).is_some_and(|targets| targets.contains(to));
    // Everything imports into lib.rs's modules; a `mod x;` alone is no import.
    assert!(graph.contains_key("lib.rs") && graph.contains_key("media/mod.rs"));
    assert!(!imports("lib.rs", "media/mod.rs"));
    // `use super::{jobs, ..}` and `jobs::create` in openapi's attribute; `pub use` re-exports are no imports.
    assert!(imports("api/openapi.rs", "api/jobs.rs"));
    assert!(imports("media/probe.rs", "media/sequence.rs") && imports("media/sequence.rs", "media/info.rs"));
    assert!(!imports("media/mod.rs", "media/probe.rs"));
    let toks = tokens(&code_of("use crate::media::{probe::MediaInfo, range::{self, A}, *}; // crate::api\nlet s = \"crate::bench\";"));
    let mut flat = Vec::new();
    use_tree(&toks[1..toks.iter().position(|t| *t == Token::Punct(";")).unwrap()], &mut Vec::new(), &mut flat);
    let flat: Vec<String> = flat.iter().map(|p| p.join("::")).collect();
    assert_eq!(flat, ["crate::media::probe::MediaInfo", "crate::media::range", "crate::media::range::A", "crate::media"]);
    assert!(!toks.contains(&Token::Ident("bench".into())) && !toks.contains(&Token::Ident("api".into())));
    // A two-file loop is found.
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a.rs".to_string(), BTreeSet::from(["b.rs".to_string()])),
        ("b.rs".to_string(), BTreeSet::from(["a.rs".to_string(), "c.rs".to_string()])),
        ("c.rs".to_string(), BTreeSet::new()),
    ]
    .into();
    assert_eq!(cycles(&graph), vec![vec!["a.rs".to_string(), "b.rs".to_string()]]);
}
